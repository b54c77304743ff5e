"""Explanations: SHAP per aspect, PNGs, and contributions that add up to the prediction."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hdeval.errors import ModelIntegrityError
from hdeval.explain.runtime import (
    BACKGROUND,
    contributions,
    explain_features,
    explain_scores,
    load_background,
    make_background,
    save_background,
)
from hdeval.explain.shap_report import explain_report, shap_explanations
from hdeval.explain.shapley import interventional_shapley
from hdeval.export.onnx_export import export_onnx
from hdeval.export.onnx_runtime import OnnxAggregator
from hdeval.paths import sha256_file
from hdeval.training.aggregators import make_aggregator

REPO = Path(__file__).resolve().parents[1]
FEATURES = ["prompt:c0", "prompt:c1", "prompt:c2", "lik:c0", "lik:c1", "lik:_text"]
ASPECTS = ["coherence", "fluency", "relevance"]
KINDS = ("linear", "forest", "monotone forest", "boosting", "mlp")
FAST = {
    "forest": {"n_estimators": 20, "max_depth": 6},
    "monotone forest": {"n_estimators": 20, "max_depth": 6, "monotonic_cst": [1] * 6},
    "boosting": {"max_iter": 30, "monotonic_cst": [1] * 6},
    "mlp": {"hidden_layer_sizes": (16, 8)},
}
EXPLAINERS = {"linear": "LinearExplainer", "forest": "TreeExplainer",
              "monotone forest": "TreeExplainer", "boosting": "TreeExplainer",
              "mlp": "ExactExplainer"}  # fmt: skip


def synthetic(n: int = 160, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Features on a 1..5 scale (log-likelihoods negative), nonlinear targets, 32 documents."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 5, size=(n, len(FEATURES)))
    X[:, 3:] = -rng.uniform(0.5, 3, size=(n, 3))
    W = rng.normal(size=(len(FEATURES), len(ASPECTS)))
    Y = 0.3 * X @ W + np.sin(X[:, : len(ASPECTS)]) + rng.normal(scale=0.1, size=(n, 3))
    X[rng.random(X.shape) < 0.05] = np.nan
    groups = np.repeat(np.arange(n // 5), 5)
    return (
        pd.DataFrame(X, columns=FEATURES),
        pd.DataFrame(Y, columns=ASPECTS),
        groups,
    )


@pytest.fixture(scope="module")
def data():
    return synthetic()


@pytest.fixture(scope="module")
def fitted(data) -> dict:
    X, Y, _ = data
    return {
        k: make_aggregator(k.split()[-1], **FAST.get(k, {})).fit(X.to_numpy(), Y.to_numpy())
        for k in KINDS
    }


@pytest.fixture(scope="module")
def exported(fitted, data, tmp_path_factory) -> dict[str, Path]:
    X, _, _ = data
    folder = tmp_path_factory.mktemp("onnx")
    paths = {}
    for kind, pipeline in fitted.items():
        paths[kind] = folder / f"{kind.replace(' ', '_')}.onnx"
        export_onnx(
            pipeline,
            len(FEATURES),
            paths[kind],
            X.to_numpy()[:60],
            feature_names=FEATURES,
            output_names=ASPECTS,
        )
    return paths


def _complete_rows(X: pd.DataFrame, n: int) -> pd.DataFrame:
    return X.dropna().iloc[:n]


# ---------------------------------------------------------------------- SHAP (analysis side)
@pytest.mark.parametrize("kind", KINDS)
def test_shap_values_per_aspect_shapes_and_additivity(kind, fitted, data) -> None:
    X, _, _ = data
    rows = X.iloc[:24]
    result = shap_explanations(
        fitted[kind], rows, background=X.iloc[40:], max_background=12, output_names=ASPECTS
    )
    assert result.explainer == EXPLAINERS[kind]
    assert result.outputs == ASPECTS
    assert result.feature_names == FEATURES
    predicted = fitted[kind].predict(rows.to_numpy())
    tolerance = 1e-6 if kind == "linear" else 1e-4
    for j, aspect in enumerate(ASPECTS):
        values = result.values(aspect)
        assert values.shape == (len(rows), len(FEATURES))
        assert list(values.columns) == FEATURES
        assert result.base_values(aspect).shape == (len(rows),)
        total = values.to_numpy().sum(axis=1) + result.base_values(aspect)
        np.testing.assert_allclose(total, predicted[:, j], atol=tolerance)
        # the plotted feature values are the imputed criterion scores, not NaN or scaled ones
        data_shown = np.asarray(result.explanations[aspect].data)
        assert not np.isnan(data_shown).any()
    assert result.mean_abs().shape == (len(FEATURES), len(ASPECTS))


@pytest.mark.parametrize("kind", ["forest", "monotone forest"])
def test_a_feature_between_a_split_and_its_float32_rounding_still_adds_up(kind) -> None:
    """scikit-learn compares a float32 feature with a float64 threshold; SHAP's algorithm
    compared both as float32 and sent such a row down the other branch (an SFHOT forest's
    explain stage stopped on it). Here the feature is the threshold's float32 rounding."""
    low = np.float32(2 / 3)
    high = low
    while True:  # a split whose float32 rounding lies above it
        high = np.nextafter(high, np.float32(1))
        split = (float(low) + float(high)) / 2
        if high - low > 1e-7 and float(np.float32(split)) > split:
            break
    X = pd.DataFrame({"a": [float(low)] * 6 + [float(high)] * 6, "b": [0.0, 1.0] * 6})
    Y = np.column_stack([X["a"] > split, 2 * (X["a"] > split)]).astype(float)
    params = {"n_estimators": 5, "max_depth": 3, "max_features": None}
    if kind == "monotone forest":
        params["monotonic_cst"] = [1, 1]
    else:
        params["bootstrap"] = False
    pipeline = make_aggregator("forest", **params).fit(X.to_numpy(), Y)
    rows = pd.DataFrame({"a": [float(np.float32(split))], "b": [1.0]})
    result = shap_explanations(pipeline, rows, background=X, output_names=["x", "y"])
    predicted = pipeline.predict(rows.to_numpy())
    assert predicted[0, 0] > 0.9  # scikit-learn's branch: above the split
    for j, output in enumerate(["x", "y"]):
        total = result.values(output).to_numpy().sum(axis=1) + result.base_values(output)
        np.testing.assert_allclose(total, predicted[:, j], atol=1e-6)


def test_report_writes_nonempty_pngs(fitted, data, tmp_path) -> None:
    X, Y, groups = data
    written = explain_report(
        fitted["linear"],
        X.iloc[:60],
        tmp_path / "plots",
        output_names=ASPECTS,
        Y=Y.iloc[:60],
        groups=groups[:60],
    )
    expected = {f"{kind}:{a}" for kind in ("beeswarm", "bar") for a in ASPECTS}
    assert set(written) == expected | {"permutation_importance"}
    for path in written.values():
        assert path.parent == tmp_path / "plots"
        blob = path.read_bytes()
        assert blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) > 2000, path
    assert (tmp_path / "plots" / "shap_beeswarm_coherence.png").is_file()


def test_report_uses_given_importances(fitted, data, tmp_path) -> None:
    X, _, _ = data
    importances = pd.Series(np.linspace(0.5, 0.0, len(FEATURES)), index=FEATURES)
    written = explain_report(
        fitted["forest"], X.iloc[:20], tmp_path, output_names=ASPECTS, importances=importances
    )
    assert written["permutation_importance"].stat().st_size > 2000


# ---------------------------------------------------------------------- contributions
@pytest.mark.parametrize("kind", KINDS)
def test_contributions_reproduce_the_pipeline_prediction(kind, fitted, data) -> None:
    X, _, _ = data
    background = make_background(X, 16)
    for _, row in _complete_rows(X, 3).iterrows():
        result = contributions(fitted[kind], row, background, output_names=ASPECTS)
        assert result.method == "exact"
        assert list(result.values.index) == FEATURES
        assert list(result.values.columns) == ASPECTS
        expected = fitted[kind].predict(row.to_numpy()[None, :])[0]
        np.testing.assert_allclose(result.prediction.to_numpy(), expected, atol=1e-9)
        total = result.base.to_numpy() + result.values.to_numpy().sum(axis=0)
        np.testing.assert_allclose(total, expected, atol=1e-6 if kind == "linear" else 1e-8)
        assert result.residual() < 1e-8
        base = fitted[kind].predict(background.astype(float)).mean(axis=0)
        np.testing.assert_allclose(result.base.to_numpy(), base, atol=1e-9)


def test_linear_contributions_match_the_closed_form(fitted, data) -> None:
    """For a linear model the interventional Shapley value is w_i * (x_i - mean background_i)."""
    X, _, _ = data
    pipeline = fitted["linear"]
    background = make_background(X.dropna(), 20).astype(float)
    row = _complete_rows(X, 1).iloc[0]
    weights = pipeline["model"].coef_.T / pipeline["scale"].scale_[:, None]  # (d, outputs)
    expected = weights * (row.to_numpy() - background.mean(axis=0))[:, None]
    result = contributions(pipeline, row, background)
    np.testing.assert_allclose(result.values.to_numpy(), expected, atol=1e-9)


def test_exact_and_sampled_shapley_on_a_hand_example() -> None:
    """f = x0 * x1 + 2 x2 against a zero baseline: phi = (x0 x1 / 2, x0 x1 / 2, 2 x2)."""

    def f(rows: np.ndarray) -> np.ndarray:
        return rows[:, 0] * rows[:, 1] + 2 * rows[:, 2]

    x, background = np.array([2.0, 3.0, 5.0]), np.zeros((1, 3))
    for max_exact in (10, 0):  # exact, then the permutation estimate
        phi, base, prediction, method = interventional_shapley(
            f, x, background, max_exact=max_exact, n_permutations=8
        )
        assert method == ("exact" if max_exact else "permutation")
        np.testing.assert_allclose(phi[:, 0], [3.0, 3.0, 10.0], atol=1e-12)
        assert base[0] == 0.0 and prediction[0] == 16.0


def test_sampled_estimate_adds_up_and_approaches_exact(fitted, data) -> None:
    X, _, _ = data
    background = make_background(X, 8)
    row = _complete_rows(X, 1).iloc[0]
    exact = contributions(fitted["forest"], row, background)
    sampled = contributions(fitted["forest"], row, background, max_exact=0, n_permutations=200)
    again = contributions(fitted["forest"], row, background, max_exact=0, n_permutations=200)
    assert sampled.method == "permutation"
    assert sampled.residual() < 1e-9
    pd.testing.assert_frame_equal(sampled.values, again.values)  # seeded: reproducible
    assert np.abs(sampled.values.to_numpy() - exact.values.to_numpy()).max() < 0.05


def test_without_background_the_reference_is_the_median_profile(fitted, data) -> None:
    X, _, _ = data
    pipeline = fitted["forest"]
    row = _complete_rows(X, 1).iloc[0]
    result = contributions(pipeline, row)
    medians = pipeline["impute"].statistics_[None, :]
    np.testing.assert_allclose(result.base.to_numpy(), pipeline.predict(medians)[0], atol=1e-9)
    assert result.residual() < 1e-9


def test_by_criterion_sums_feature_columns(fitted, data) -> None:
    X, _, _ = data
    row = _complete_rows(X, 1).iloc[0]
    result = contributions(fitted["linear"], row, make_background(X, 8), output_names=ASPECTS)
    grouped = result.by_criterion()
    assert list(grouped.values.index) == ["c0", "c1", "c2", "likelihood given the source"]
    np.testing.assert_allclose(
        grouped.values.loc["c0"].to_numpy(),
        result.values.loc[["prompt:c0", "lik:c0"]].sum().to_numpy(),
    )
    assert grouped.residual() < 1e-9
    payload = json.loads(json.dumps(grouped.to_dict()))
    assert set(payload) == set(ASPECTS)
    assert set(payload["fluency"]) == {"base", "prediction", "contributions"}


def test_by_criterion_when_criteria_are_named_like_the_aspects() -> None:
    """The default bundle's criteria are its aspects (``lik:coherence`` explains the aspect
    coherence); grouping once read those ids as the table's aspect columns and left every
    explanation empty."""
    rng = np.random.default_rng(4)
    names = ["lik:coherence", "lik.p10:coherence", "lik:fluency", "pmi:_text", "len.words:_text"]
    X = rng.normal(size=(60, len(names)))
    Y = np.c_[X[:, 0] + X[:, 3], X[:, 2] - 0.2 * X[:, 4]]
    model = make_aggregator("linear").fit(X, Y)
    result = contributions(
        model, X[0], X[:8], feature_names=names, output_names=["coherence", "fluency"]
    ).by_criterion()
    assert list(result.values.index) == [
        "coherence", "fluency", "grounding in the source (PMI)", "length",
    ]  # fmt: skip
    payload = result.to_dict()
    assert set(payload) == {"coherence", "fluency"}
    for part in payload.values():
        assert len(part["contributions"]) == 4 and any(part["contributions"].values())
        assert abs(part["base"] + sum(part["contributions"].values()) - part["prediction"]) < 1e-9


def test_a_clipped_score_is_explained_as_reported() -> None:
    """A prediction above its aspect's range is reported at the top of the range; one more
    contribution, named after the range, takes the explanation there."""
    from hdeval.explain.runtime import Contributions

    values = pd.DataFrame({"a": [2.0, 1.5], "b": [0.5, 0.25]}, index=["x", "y"])
    raw = Contributions(
        values,
        pd.Series({"a": 3.0, "b": 3.0}),
        pd.Series({"a": 6.5, "b": 3.75}),
        "exact",
    )
    clipped = raw.clipped({"a": [1, 5], "b": [1, 5]})
    payload = clipped.to_dict()
    assert payload["a"]["prediction"] == 5.0
    assert payload["a"]["contributions"]["clipped to the range [1, 5]"] == -1.5
    assert "clipped to the range [1, 5]" not in payload["b"]["contributions"]  # not clipped
    assert clipped.residual() < 1e-12 and raw.clipped(None) is raw


# ---------------------------------------------------------------------- production (ONNX)
@pytest.mark.parametrize("kind", KINDS)
def test_contributions_from_onnx_match_the_pipeline(kind, fitted, exported, data) -> None:
    X, _, _ = data
    background = make_background(X, 16)
    aggregator = OnnxAggregator(exported[kind])
    row = _complete_rows(X, 1).iloc[0]
    onnx_result = contributions(aggregator, row.to_dict(), background)
    assert list(onnx_result.values.index) == FEATURES  # names from the ONNX metadata
    assert list(onnx_result.values.columns) == ASPECTS
    assert onnx_result.residual() < 1e-9
    sk_result = contributions(fitted[kind], row, background, output_names=ASPECTS)
    np.testing.assert_allclose(
        onnx_result.values.to_numpy(), sk_result.values.to_numpy(), atol=1e-5
    )
    np.testing.assert_allclose(
        onnx_result.prediction.to_numpy(), fitted[kind].predict(row.to_numpy()[None])[0], atol=1e-5
    )


def test_explain_features_skips_rows_with_failed_scores(exported, data) -> None:
    X, _, _ = data
    table = X.iloc[:6].copy()
    table.iloc[0, 2] = np.nan
    table.index = [f"s{i}" for i in range(6)]
    result = explain_features(
        OnnxAggregator(exported["mlp"]), table, make_background(X, 8), by_criterion=True
    )
    assert list(result) == list(table.index)
    assert result["s0"] is None
    for sample_id in table.index[1:]:
        if table.loc[sample_id].isna().any():
            continue
        assert result[sample_id] is not None and result[sample_id].residual() < 1e-9
        assert "c0" in result[sample_id].values.index


def test_background_roundtrip_and_integrity(data, tmp_path) -> None:
    X, _, _ = data
    assert load_background(tmp_path) is None
    background = make_background(X, 10, seed=3)
    assert background.shape == (10, len(FEATURES)) and background.dtype == np.float32
    path = save_background(tmp_path, background)
    assert path.name == BACKGROUND
    digest = sha256_file(path)
    loaded = load_background(tmp_path, digest, n_features=len(FEATURES))
    np.testing.assert_array_equal(loaded, background.astype(np.float64))
    with pytest.raises(ModelIntegrityError, match="sha256"):
        load_background(tmp_path, "0" * 64)
    with pytest.raises(ModelIntegrityError, match="shape"):
        load_background(tmp_path, n_features=3)
    path.unlink()
    with pytest.raises(ModelIntegrityError, match="missing"):
        load_background(tmp_path, digest)


def test_production_path_needs_neither_sklearn_nor_shap(exported, data, tmp_path) -> None:
    """What ``hdeval score --explain`` runs: ONNX file + background.npy, nothing else."""
    X, _, _ = data
    save_background(tmp_path, make_background(X, 8))
    row = _complete_rows(X, 1).iloc[0].to_dict()
    script = textwrap.dedent(
        f"""
        import json, sys
        from hdeval.explain.runtime import contributions, load_background
        from hdeval.export.onnx_runtime import OnnxAggregator
        aggregator = OnnxAggregator({str(exported["forest"])!r})
        result = contributions(aggregator, {row!r}, load_background({str(tmp_path)!r}))
        heavy = sorted({{m.split(".")[0] for m in sys.modules}}
                       & {{"sklearn", "shap", "matplotlib", "scipy", "skl2onnx", "onnx"}})
        print(json.dumps({{"heavy": heavy, "residual": result.residual(),
                          "aspects": list(result.to_dict())}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["heavy"] == []
    assert report["residual"] < 1e-9
    assert report["aspects"] == ASPECTS


# ---------------------------------------------------------------------- a whole bundle
class _StandInJudge:
    """Deterministic digit distributions from a hash of the prompt; no model needed."""

    identity = "stand-in:v1"

    def digit_scores(self, segments, suffixes):
        from hdeval.llm.types import DigitScore

        out = []
        for suffix in suffixes:
            digest = hashlib.sha256(("".join(segments) + suffix).encode()).digest()
            seed = int.from_bytes(digest[:4], "little")
            probs = np.random.default_rng(seed).dirichlet(np.ones(5))
            out.append(DigitScore(probs=tuple(float(p) for p in probs), mass=0.9))
        return out


def test_explain_scores_on_a_bundle(tmp_path) -> None:
    """The ``hdeval score --explain`` path: Evaluator.load, score_samples, explain_scores."""
    from hdeval.export.bundle import export_bundle
    from hdeval.export.evaluator import Evaluator
    from hdeval.llm.cache import ResultCache
    from hdeval.llm.judge import CachedJudge
    from hdeval.params import TaskSpec
    from hdeval.scoring.columns import feature_columns
    from hdeval.tree.criteria import CriteriaTree, Criterion

    tree = CriteriaTree(
        [
            Criterion("coherence", "coherence", "well organized"),
            Criterion("fluency", "fluency", "grammatical"),
            Criterion("coherence.order", "order", "logical order", "coherence", 2),
        ]
    )
    names = feature_columns([c.id for c in tree], ["prompt"])
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 5, (80, len(names)))
    Y = np.c_[X[:, 0] + 0.5 * X[:, 2], X[:, 1]] + rng.normal(0, 0.1, (80, 2))
    pipeline = make_aggregator("forest", n_estimators=10).fit(X, Y)
    bundle = export_bundle(
        tmp_path / "bundle",
        pipeline,
        tree,
        names,
        ["coherence", "fluency"],
        llm_identity=_StandInJudge.identity,
        task=TaskSpec(),
        modes=["prompt"],
        unconditioned=False,
        training_data="synthetic",
        sample=X,
    )
    judge = _StandInJudge()
    evaluator = Evaluator.load(bundle, CachedJudge(judge, ResultCache(tmp_path / "cache.sqlite")))
    samples = pd.DataFrame(
        {"doc_id": ["d1", "d1"], "source": ["An article."] * 2, "output": ["One.", "Two."]},
        index=pd.Index(["a", "b"]),
    )
    result = evaluator.score_samples(samples, progress=False)

    median = explain_scores(evaluator, result.criteria)  # no background.npy: median profile
    assert median["a"]["reference"] == "medians" and median["a"]["method"] == "exact"

    save_background(bundle, make_background(X, 16))
    explained = explain_scores(evaluator, result.criteria, by_criterion=True)
    assert list(explained) == ["a", "b"]
    for sample_id, entry in explained.items():
        assert entry["reference"] == "background (16 rows)"
        assert set(entry["aspects"]) == {"coherence", "fluency"}
        for aspect, part in entry["aspects"].items():
            assert set(part["contributions"]) == {"coherence", "fluency", "coherence.order"}
            total = part["base"] + sum(part["contributions"].values())
            assert abs(total - part["prediction"]) < 1e-9
            assert abs(part["prediction"] - result.aspects.loc[sample_id, aspect]) < 1e-9
    json.dumps(explained)  # JSON-ready
