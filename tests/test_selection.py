"""Model selection on synthetic feature tables: which candidates exist, that grouped CV picks the
informative feature group and the shipped bundle's columns, and that the CV table is complete."""

from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest

from hdeval.data import LabelledData
from hdeval.errors import ConfigError
from hdeval.params import AggregatorParams, HierarchyParams, Params
from hdeval.scoring.columns import Profile, feature_columns
from hdeval.training.aggregators import constraints
from hdeval.training.fit import select_and_fit
from hdeval.training.selection import (
    FeatureSet,
    best_candidate,
    candidate_feature_sets,
    selection_table,
)
from hdeval.tree.criteria import CriteriaTree, Criterion

TREE = CriteriaTree(
    [
        Criterion("coh", "coherence", "d"),
        Criterion("flu", "fluency", "d"),
        Criterion("coh_a", "a", "d", parent="coh", layer=2, decomposed=True),
        Criterion("coh_b", "b", "d", parent="coh", layer=2),
        Criterion("flu_a", "c", "d", parent="flu", layer=2),
        Criterion("coh_a_x", "x", "d", parent="coh_a", layer=3),
    ]
)


def _data(n_docs: int = 12, per_doc: int = 8, seed: int = 0):
    """Targets that follow the layer-2 likelihood columns; prompt columns are noise."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    ids = [f"r{i}" for i in range(n)]
    columns = feature_columns([c.id for c in TREE], ["prompt", "likelihood"], True)
    features = pd.DataFrame(rng.normal(size=(n, len(columns))), index=ids, columns=columns)
    signal = features["lik:coh_a"] + features["lik:flu_a"]
    targets = pd.DataFrame(
        {"coherence": signal + 0.1 * rng.normal(size=n), "fluency": signal}, index=ids
    )
    return features, LabelledData(grouped_samples(ids, per_doc), targets)


def grouped_samples(ids: list[str], per_doc: int) -> pd.DataFrame:
    """Sample rows for ``ids``, ``per_doc`` consecutive ones per document."""
    n = len(ids)
    return pd.DataFrame(
        {
            "doc_id": [f"d{i // per_doc}" for i in range(n)],
            "system_id": [f"s{i % per_doc}" for i in range(n)],
            "source": "src",
            "output": "out",
            "references": [[] for _ in range(n)],
        },
        index=ids,
    )


#: Likelihood columns as GPTScore reads them: one mean each, no other signal of the text.
MEANS_ONLY = {
    "likelihood_stats": ["mean"],
    "source_free": False,
    "length": False,
    "families": [],
    "end_of_text": False,
}


def test_candidates_follow_the_search_space_and_what_was_scored() -> None:
    hierarchy = HierarchyParams(modes=["prompt", "likelihood"], unconditioned=True, **MEANS_ONLY)
    everything = candidate_feature_sets(hierarchy, AggregatorParams(), 3, unconditioned=True)
    # each of prompt, likelihood, both: 3 depths x with/without lik:_text
    assert len(everything) == 3 * 6
    assert FeatureSet(("prompt",), 1, True, Profile()) in everything
    without_text = candidate_feature_sets(hierarchy, AggregatorParams(), 3, unconditioned=False)
    assert len(without_text) == 3 * 3 and not any(c.unconditioned for c in without_text)
    shallow = candidate_feature_sets(hierarchy, AggregatorParams(), depth=2, unconditioned=True)
    assert max(c.depth for c in shallow) == 2
    prompt_only = HierarchyParams(modes=["prompt"], **MEANS_ONLY)
    assert {c.modes for c in candidate_feature_sets(prompt_only, AggregatorParams(), 3, False)} == {
        ("prompt",)
    }
    # mode pruning dropped the criterion likelihoods but kept the text's own likelihood
    pruned = candidate_feature_sets(prompt_only, AggregatorParams(), 3, unconditioned=True)
    assert FeatureSet(("prompt",), 3, True) in pruned and len(pruned) == 6
    with pytest.raises(ConfigError, match="leave no feature set"):
        candidate_feature_sets(
            prompt_only, AggregatorParams(feature_modes=["likelihood"]), 3, unconditioned=True
        )


def test_a_candidate_without_the_texts_signals_reads_no_family() -> None:
    """The families' columns come with the text's own signals: a bundle shipped without them
    must not say it reads a family (a references card would refuse rows it never reads)."""
    hierarchy = HierarchyParams(families=["references", "repetition"])
    for candidate in candidate_feature_sets(hierarchy, AggregatorParams(), 2, unconditioned=True):
        families = candidate.profile.families
        assert families == (("references", "repetition") if candidate.unconditioned else ())


def test_feature_set_cuts_the_tree_and_orders_columns_like_the_scorer() -> None:
    cut = FeatureSet(("prompt", "likelihood"), 2, True)
    tree = cut.tree(TREE)
    assert [c.id for c in tree] == ["coh", "flu", "coh_a", "coh_b", "flu_a"]
    assert not tree.get("coh_a").decomposed  # a leaf of the shipped tree
    assert cut.columns(TREE)[:2] == ["prompt:coh", "prompt:flu"]
    assert cut.columns(TREE)[-1] == "lik:_text" and len(cut.columns(TREE)) == 11
    assert cut.name == "prompt+likelihood L1-2+text"
    profiled = FeatureSet(("likelihood",), 1, True, Profile(("mean", "p10"), True, True))
    assert profiled.columns(TREE) == [
        "lik:coh", "lik.p10:coh", "lik:flu", "lik.p10:flu",
        "lik:_text", "lik.p10:_text", "lik:_free", "lik.p10:_free",
        "pmi:_text", "pmi.sum:_text", "len.words:_text",
    ]  # fmt: skip


def test_grouped_cv_table_ranks_the_informative_group_first() -> None:
    features, data = _data()
    groups = data.samples["doc_id"].to_numpy()
    both = HierarchyParams(modes=["prompt", "likelihood"], **MEANS_ONLY)
    candidates = candidate_feature_sets(both, AggregatorParams(), 3, True)
    table = selection_table(
        TREE, features, data.targets, groups, candidates, ["linear", "tree"], 4, 0
    )
    assert len(table) == 2 * len(candidates)
    assert table["cv_pearson"].is_monotonic_decreasing
    top = table.iloc[0]
    assert "likelihood" in top["modes"] and top["layers"] >= 2 and top["cv_pearson"] > 0.9
    prompt_rows = table[(table["modes"] == "prompt") & ~table["unconditioned"]]
    assert prompt_rows["cv_pearson"].max() < 0.3  # noise does not look good under grouped CV


def test_select_and_fit_ships_the_cv_best_with_bundle_columns(tmp_path) -> None:
    features, data = _data()
    params = Params(
        hierarchy=HierarchyParams(**MEANS_ONLY),
        aggregator=AggregatorParams(
            kinds=["linear", "tree"], n_trials=3, cv_folds=4, prefer_simpler_within=0.0
        ),
    )
    selected = select_and_fit(params, TREE, features, data, tmp_path)
    chosen = selected.feature_set
    assert "likelihood" in chosen.modes and chosen.depth >= 2
    expected = feature_columns([c.id for c in selected.tree], chosen.modes, chosen.unconditioned)
    assert list(selected.features.columns) == expected
    assert selected.cv_pearson >= selected.table["cv_pearson"].iloc[0]
    predicted = selected.model.predict(selected.features.to_numpy())
    assert predicted.shape == (len(features), 2)
    summary = selected.summary()
    assert summary["kind"] == selected.kind and len(summary["cv_table"]) == len(selected.table)
    assert (tmp_path / "optuna.sqlite").is_file()
    # each aspect's aggregator against its best single input column, by the same CV
    fallbacks = {f["aspect"]: f for f in summary["fallbacks"]}
    assert set(fallbacks) == {"coherence", "fluency"}
    assert all(f["column"] in selected.features.columns for f in fallbacks.values())
    assert not any(f["replaced"] for f in fallbacks.values())  # two columns beat one here


def test_the_simplest_candidate_within_the_margin_is_shipped() -> None:
    """The default run's top rows: an MLP 0.005 above a linear model on fewer features. Inside
    ``prefer_simpler_within`` the linear one ships (an MLP can reverse outside the training
    range, as DHP's typos and deletions found); outside it, or with 0, the CV-best does."""
    text, plain = FeatureSet(("likelihood",), 1, True), FeatureSet(("likelihood",), 1, False)
    table = pd.DataFrame(
        [
            {"features": text.name, "kind": "mlp", "n_features": 5, "cv_pearson": 0.369},
            {"features": plain.name, "kind": "linear", "n_features": 4, "cv_pearson": 0.364},
            {"features": text.name, "kind": "linear", "n_features": 5, "cv_pearson": 0.361},
            {"features": plain.name, "kind": "forest", "n_features": 4, "cv_pearson": 0.300},
        ]
    )
    assert best_candidate(table, [text, plain]) == (text, "mlp", 0.369)
    assert best_candidate(table, [text, plain], 0.01) == (plain, "linear", 0.364)
    assert best_candidate(table, [text, plain], 0.001) == (text, "mlp", 0.369)
    assert best_candidate(table, [text, plain], 0.1)[:2] == (plain, "linear")


def test_the_shipped_linear_aggregator_is_nonnegative_and_each_space_has_its_study(
    tmp_path,
) -> None:
    """``aggregator.nonnegative`` reaches selection, tuning and the final fit; switching it
    on a kept Optuna file starts a study of its own instead of resuming the other space."""
    features, data = _data()
    features["lik:flu_a"] = -features["lik:flu_a"]  # a criterion that tracks the target inversely

    def ship(nonnegative: bool):
        search = AggregatorParams(kinds=["linear"], n_trials=3, cv_folds=4, nonnegative=nonnegative)
        params = Params(hierarchy=HierarchyParams(**MEANS_ONLY), aggregator=search)
        return select_and_fit(params, TREE, features, data, tmp_path)

    signed = ship(False)
    assert (signed.model.named_steps["model"].coef_ < 0).any()
    kept = ship(True)
    assert (kept.model.named_steps["model"].coef_ >= 0).all()
    assert set(kept.params["orientation"]) == {1}
    assert kept.cv_pearson < signed.cv_pearson  # the constraint costs the inverse criterion
    names = optuna.get_all_study_names(f"sqlite:///{tmp_path / 'optuna.sqlite'}")
    assert len(names) == 2 and any("oriented" in n for n in names)


def test_ablations_refit_every_subset_under_its_own_constraints() -> None:
    """A bundle shipped on fewer columns than the final layer has (likelihood only, where the
    layer also scored prompts): its tuned parameters and the weight signs of each ablation
    follow that ablation's own columns, and every ablation predicts every held-out row."""
    from hdeval.training.fit import ablation_predictions

    features, data = _data()
    features["lik.surprise:_text"] = -features["lik:_text"]  # lower is better
    train_ids, test_ids = features.index[:64], features.index[64:]
    train = LabelledData(data.samples.loc[train_ids], data.targets.loc[train_ids])
    shipped = FeatureSet(("likelihood",), 2, True).columns(TREE)
    tuned = {"alpha": 0.5, **constraints("linear", True, shipped)}
    predictions = ablation_predictions(
        TREE, features.loc[train_ids], train, features.loc[test_ids], "linear", tuned, 0,
        {"coherence": (-5.0, 5.0), "fluency": (-5.0, 5.0)}, nonnegative=True,
    )  # fmt: skip
    assert {"hdeval", "prompt_only", "likelihood_only", "text_signals_only"} <= set(predictions)
    for name, table in predictions.items():
        if name != "averaged_scores":
            assert table.shape == (len(test_ids), 2) and table.notna().all().all(), name
