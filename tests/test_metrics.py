"""Agreement metrics: point figures at three levels and the document-bootstrap CIs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hdeval.metrics import CORRELATIONS, agreement, level_correlations

ASPECTS = ["coherence", "fluency"]


@pytest.fixture()
def rated() -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, pd.Series]:
    rng = np.random.default_rng(3)
    n_docs, per_doc = 7, 6
    docs = pd.Series(np.repeat([f"d{i}" for i in range(n_docs)], per_doc))
    systems = pd.Series(np.tile([f"s{i}" for i in range(per_doc)], n_docs))
    human = pd.DataFrame(rng.integers(1, 6, (len(docs), 2)).astype(float), columns=ASPECTS)
    predicted = human + rng.normal(0, 1.5, human.shape)
    predicted.loc[docs == "d2", "fluency"] = 3.0  # a constant document: skipped at summary level
    return predicted, human, docs, systems


def _reference_draws(predicted, human, docs, systems, n_boot, seed) -> dict:
    """The bootstrap spelt out: resample documents, relabel repeats, recompute every level."""
    rng = np.random.default_rng(seed)
    unique = pd.unique(docs)
    draws: dict = {}
    for _ in range(n_boot):
        chosen = rng.choice(unique, size=len(unique), replace=True)
        rows = np.concatenate([np.flatnonzero(docs == d) for d in chosen])
        relabelled = np.concatenate(
            [np.full(int((docs == d).sum()), i) for i, d in enumerate(chosen)]
        )
        for a in ASPECTS:
            levels = level_correlations(
                predicted[a].to_numpy()[rows], human[a].to_numpy()[rows], relabelled, systems[rows]
            )
            for level, values in levels.items():
                for name, value in values.items():
                    draws.setdefault((a, level, name), []).append(value)
    return draws


def test_bootstrap_cis_equal_the_spelt_out_resampling(rated) -> None:
    predicted, human, docs, systems = rated
    result = agreement(predicted, human, docs, systems, n_boot=30, seed=5)
    draws = _reference_draws(predicted, human, docs.to_numpy(), systems.to_numpy(), 30, 5)
    for (aspect, level, name), values in draws.items():
        values = np.asarray(values)
        values = values[~np.isnan(values)]
        expected = [np.percentile(values, 2.5), np.percentile(values, 97.5)]
        assert result[aspect][level][name + "_ci"] == pytest.approx(expected, abs=1e-12)
    for level in ("dataset", "summary", "system"):
        for name in CORRELATIONS:
            low, high = result["average"][level][name + "_ci"]
            assert low <= result["average"][level][name] + 0.5 and low <= high


def test_point_figures_skip_constant_documents_and_need_three_systems(rated) -> None:
    predicted, human, docs, systems = rated
    result = agreement(predicted, human, docs, systems, n_boot=0)
    per_doc = [
        np.corrcoef(predicted.loc[docs == d, "fluency"], human.loc[docs == d, "fluency"])[0, 1]
        for d in pd.unique(docs)
        if d != "d2"
    ]
    assert result["fluency"]["summary"]["pearson"] == pytest.approx(np.mean(per_doc))
    assert "pearson_ci" not in result["fluency"]["dataset"]
    two_systems = systems.where(systems.isin(["s0", "s1"]), "s0")
    assert np.isnan(
        agreement(predicted, human, docs, two_systems, 0)["coherence"]["system"]["pearson"]
    )


@pytest.mark.parametrize("level", ["dataset", "summary", "system"])
def test_paired_difference_on_the_same_drawn_documents(rated, level) -> None:
    """A scorer against itself differs by exactly 0 in every draw; a noisier copy of the same
    predictions is worse, with a paired CI below 0; rows one of them failed are left out of
    both."""
    from hdeval.metrics import paired_difference

    predicted, human, docs, systems = rated
    same = paired_difference(predicted, predicted, human, docs, systems, level, n_boot=50)
    assert same == {"difference": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": len(predicted)}
    noisy = predicted + np.random.default_rng(9).normal(0, 3.0, predicted.shape)
    noisy.iloc[0, 0] = np.nan
    worse = paired_difference(noisy, predicted, human, docs, systems, level, n_boot=200)
    assert worse["n"] == len(predicted) - 1
    assert worse["ci_low"] <= worse["difference"] <= worse["ci_high"]
    if level != "system":  # 6 system means average most of the noise away
        assert worse["ci_high"] < 0
    own = [agreement(t.iloc[1:], human, docs, systems, 0)["average"][level]["pearson"]
           for t in (noisy, predicted)]  # fmt: skip
    assert worse["difference"] == pytest.approx(own[0] - own[1])
