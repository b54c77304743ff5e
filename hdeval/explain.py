"""Explanations of an aggregator (HD-Eval §4.4): SHAP values, plots, and per-score contributions.

Two parts, with different dependencies:

* **Production** (``hdeval score --explain``): :func:`contributions` splits each predicted aspect
  score into a base value plus one contribution per feature column, such that
  ``base + sum(contributions) == prediction``. It needs only numpy, the ONNX aggregator and a
  small background matrix of training feature rows stored with the bundle (``background.npy``);
  neither scikit-learn nor shap is imported (shap itself imports scikit-learn). The values are
  interventional Shapley values against the background: the base value is the mean prediction
  over the background rows, and a coalition's value is the mean prediction over the background
  rows with the coalition's features set to the explained row's. With at most ``max_exact``
  features they are computed exactly (every coalition, ``2**d`` x background rows). With more,
  they are estimated from ``n_permutations`` seeded random feature orders taken in antithetic
  pairs; each order's marginal contributions telescope to ``prediction - base``, so the estimate
  still adds up exactly and is reproducible. Without a background, one all-NaN row is used: the
  aggregator imputes it with the training medians, so contributions are then measured against
  the "median criterion scores" profile.
* **Analysis** (training side): :func:`shap_explanations` computes SHAP values of a fitted
  scikit-learn pipeline (as made by :func:`hdeval.aggregators.make_aggregator`) per aspect with a
  model-appropriate shap explainer: ``LinearExplainer`` for linear models, ``TreeExplainer``
  (interventional) for trees and forests, and otherwise ``shap.Explainer`` over the prediction
  function with an independent masker (exact up to 10 features, permutation above), all on a
  small background sample. :func:`plot_shap` writes beeswarm and bar PNGs per aspect and
  :func:`plot_permutation_importance` a permutation-importance PNG; :func:`explain_report` does
  all of it. shap, matplotlib (Agg backend) and scikit-learn are imported inside these functions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hdeval.errors import HDEvalError, ModelIntegrityError

__all__ = [
    "BACKGROUND",
    "Contributions",
    "ShapResult",
    "contributions",
    "explain_features",
    "explain_report",
    "explain_scores",
    "interventional_shapley",
    "load_background",
    "make_background",
    "plot_permutation_importance",
    "plot_shap",
    "save_background",
    "shap_explanations",
]

#: File name of the background matrix inside a bundle.
BACKGROUND = "background.npy"
#: Default number of background rows kept from the training features.
BACKGROUND_ROWS = 32
#: Up to this many features, Shapley values are exact (2**d coalitions).
MAX_EXACT_FEATURES = 10
#: Feature orders sampled (in antithetic pairs) above MAX_EXACT_FEATURES.
N_PERMUTATIONS = 64
#: Most rows handed to the model in one predict call.
_BATCH_ROWS = 65536

Predict = Callable[[np.ndarray], np.ndarray]


# ====================================================================== background matrix
def make_background(
    features: pd.DataFrame | np.ndarray, n_rows: int = BACKGROUND_ROWS, seed: int = 0
) -> np.ndarray:
    """A seeded random sample of at most ``n_rows`` training feature rows (NaNs kept), float32."""
    matrix = np.asarray(features, dtype=np.float64)
    if matrix.ndim != 2 or len(matrix) == 0:
        raise HDEvalError(f"background needs a non-empty 2-D feature matrix, got {matrix.shape}")
    if len(matrix) > n_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(matrix), n_rows, replace=False))
        matrix = matrix[rows]
    return matrix.astype(np.float32)


def save_background(bundle: str | Path, background: np.ndarray) -> Path:
    """Write ``background.npy`` into a bundle directory; returns its path."""
    path = Path(bundle) / BACKGROUND
    np.save(path, np.asarray(background, dtype=np.float32), allow_pickle=False)
    return path


def load_background(
    bundle: str | Path, expected_sha256: str | None = None, n_features: int | None = None
) -> np.ndarray | None:
    """The bundle's background matrix, or None if it has none (old bundles).

    ``expected_sha256`` (from the card) and ``n_features`` are checked when given.
    """
    from hdeval.onnx_runtime import file_sha256

    path = Path(bundle) / BACKGROUND
    if not path.is_file():
        if expected_sha256 is not None:
            raise ModelIntegrityError(f"{path} is listed in the card but missing")
        return None
    if expected_sha256 is not None and file_sha256(path) != expected_sha256:
        raise ModelIntegrityError(f"{path} does not match the sha256 recorded in the card")
    try:
        matrix = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ModelIntegrityError(f"{path} is not a readable background matrix: {exc}") from exc
    if matrix.ndim != 2 or (n_features is not None and matrix.shape[1] != n_features):
        raise ModelIntegrityError(
            f"{path} has shape {matrix.shape}, expected (n, {n_features or 'n_features'})"
        )
    return matrix.astype(np.float64)


# ====================================================================== Shapley values
def _batched(predict: Predict, rows: np.ndarray) -> np.ndarray:
    """``predict`` over ``rows`` (n, d) in batches, as a float64 (n, n_outputs) array."""
    out = [
        np.asarray(predict(rows[i : i + _BATCH_ROWS]), dtype=np.float64).reshape(
            len(rows[i : i + _BATCH_ROWS]), -1
        )
        for i in range(0, len(rows), _BATCH_ROWS)
    ]
    return np.concatenate(out) if out else np.empty((0, 0))


def _exact(predict: Predict, x: np.ndarray, background: np.ndarray) -> tuple[np.ndarray, ...]:
    """Exact interventional Shapley values over all 2**d coalitions."""
    d, k = len(x), len(background)
    masks = np.arange(1 << d)
    member = ((masks[:, None] >> np.arange(d)) & 1).astype(bool)  # (2**d, d)
    rows = np.where(member[:, None, :], x, background[None, :, :]).reshape(-1, d)
    value = _batched(predict, rows).reshape(1 << d, k, -1).mean(axis=1)  # (2**d, n_out)
    sizes = member.sum(axis=1)
    weight = np.array(
        [math.factorial(s) * math.factorial(d - s - 1) / math.factorial(d) for s in range(d)]
    )
    phi = np.empty((d, value.shape[1]))
    for i in range(d):
        without = masks[~member[:, i]]
        w = weight[sizes[without]][:, None]
        phi[i] = (w * (value[without | (1 << i)] - value[without])).sum(axis=0)
    return phi, value[0], value[-1]


def _sampled(
    predict: Predict, x: np.ndarray, background: np.ndarray, n_permutations: int, seed: int
) -> tuple[np.ndarray, ...]:
    """Permutation-sampling estimate (antithetic pairs); adds up exactly by telescoping."""
    d, k = len(x), len(background)
    rng = np.random.default_rng(seed)
    steps = np.arange(d + 1)[:, None]
    phi: np.ndarray | None = None
    base = prediction = None
    n_pairs = max(1, n_permutations // 2)
    for _ in range(n_pairs):
        first = rng.permutation(d)
        for order in (first, first[::-1]):
            rank = np.empty(d, dtype=int)
            rank[order] = np.arange(d)
            member = rank[None, :] < steps  # (d+1, d): row j has the first j features of x
            rows = np.where(member[None, :, :], x, background[:, None, :]).reshape(-1, d)
            pred = _batched(predict, rows).reshape(k, d + 1, -1).mean(axis=0)  # (d+1, n_out)
            if phi is None:
                phi = np.zeros((d, pred.shape[1]))
                base, prediction = pred[0], pred[-1]
            phi[order] += np.diff(pred, axis=0)
    assert phi is not None
    return phi / (2 * n_pairs), base, prediction


def interventional_shapley(
    predict: Predict,
    x: np.ndarray,
    background: np.ndarray,
    *,
    max_exact: int = MAX_EXACT_FEATURES,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Shapley values of ``predict`` at row ``x`` against ``background`` rows.

    Returns ``(values (d, n_outputs), base (n_outputs,), prediction (n_outputs,), method)`` with
    ``base + values.sum(0) == prediction`` up to float rounding; ``method`` is "exact" or
    "permutation". ``predict`` maps an (n, d) float array to (n, n_outputs) or (n,).
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    background = np.asarray(background, dtype=np.float64)
    if background.ndim != 2 or background.shape[1] != len(x) or len(background) == 0:
        raise HDEvalError(
            f"background has shape {background.shape}, expected (n >= 1, {len(x)}) for this row"
        )
    if len(x) <= max_exact:
        phi, base, prediction = _exact(predict, x, background)
        return phi, base, prediction, "exact"
    phi, base, prediction = _sampled(predict, x, background, n_permutations, seed)
    return phi, base, prediction, "permutation"


# ====================================================================== contributions
def _criterion_of(column: str) -> str:
    """Criterion id of a feature column ("lik:coh" -> "coh"); a bare id stays itself."""
    return column.split(":", 1)[1] if ":" in column else column


@dataclass
class Contributions:
    """One row's predicted aspect scores split into a base value and per-feature contributions.

    ``values`` is indexed by feature (or criterion) with one column per output (aspect);
    ``base`` and ``prediction`` are indexed by output.
    """

    values: pd.DataFrame
    base: pd.Series
    prediction: pd.Series
    method: str

    def residual(self) -> float:
        """Largest |base + sum(contributions) - prediction| over the outputs."""
        total = self.base + self.values.sum(axis=0)
        return float(np.max(np.abs(total - self.prediction).to_numpy(), initial=0.0))

    def by_criterion(self) -> Contributions:
        """Contributions summed per criterion id (``prompt:x`` and ``lik:x`` become ``x``)."""
        ids = [_criterion_of(str(c)) for c in self.values.index]
        summed = self.values.groupby(ids, sort=False).sum()
        return Contributions(summed, self.base.copy(), self.prediction.copy(), self.method)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """JSON-ready: ``{output: {"base", "prediction", "contributions": {feature: value}}}``."""
        return {
            str(output): {
                "base": float(self.base[output]),
                "prediction": float(self.prediction[output]),
                "contributions": {str(f): float(v) for f, v in self.values[output].items()},
            }
            for output in self.values.columns
        }


def _as_predict(model: Any) -> tuple[Predict, list[str] | None, list[str] | None]:
    """A prediction function for an ONNX file/aggregator, a fitted estimator or a callable."""
    from hdeval.onnx_runtime import OnnxAggregator

    if isinstance(model, str | Path):
        model = OnnxAggregator(model)
    if isinstance(model, OnnxAggregator):
        return model.predict, model.feature_names, model.output_names
    if hasattr(model, "predict"):
        names = getattr(model, "feature_names_in_", None)
        return model.predict, None if names is None else [str(n) for n in names], None
    if callable(model):
        return model, None, None
    raise HDEvalError(f"cannot explain a {type(model).__name__}: it has no predict()")


def _as_row(features_row: Any, names: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    """The row as a float vector in the model's feature order, and the feature names."""
    if isinstance(features_row, pd.DataFrame):
        if len(features_row) != 1:
            raise HDEvalError(f"explain one row at a time, got {len(features_row)} rows")
        features_row = features_row.iloc[0]
    if isinstance(features_row, Mapping) and not isinstance(features_row, pd.Series):
        features_row = pd.Series(features_row, dtype=float)
    if isinstance(features_row, pd.Series):
        if names is not None:
            missing = [n for n in names if n not in features_row.index]
            if missing:
                raise HDEvalError(f"features row lacks columns {missing[:5]}")
            features_row = features_row[list(names)]
        return features_row.to_numpy(dtype=np.float64), [str(i) for i in features_row.index]
    row = np.asarray(features_row, dtype=np.float64).reshape(-1)
    return row, list(names) if names is not None else [f"x{i}" for i in range(len(row))]


def contributions(
    model: Any,
    features_row: pd.Series | Mapping[str, float] | np.ndarray | pd.DataFrame,
    background: np.ndarray | pd.DataFrame | None = None,
    *,
    feature_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    max_exact: int = MAX_EXACT_FEATURES,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> Contributions:
    """Each feature's contribution to each output for one row: ``base + sum == prediction``.

    ``model`` is an :class:`~hdeval.onnx_runtime.OnnxAggregator`, a path to an exported ONNX
    file, a fitted scikit-learn pipeline or a prediction callable. ``background`` holds training
    feature rows (see :func:`make_background`); None means one all-NaN row, i.e. the pipeline's
    median imputation (only for models that impute NaN). Names default to those recorded in
    the ONNX file (or ``x0..``, ``y0..``).
    """
    predict, model_features, model_outputs = _as_predict(model)
    names = list(feature_names) if feature_names is not None else model_features
    row, names = _as_row(features_row, names)
    bg = (
        np.full((1, len(row)), np.nan)
        if background is None
        else np.asarray(background, dtype=np.float64)
    )
    phi, base, prediction, method = interventional_shapley(
        predict, row, bg, max_exact=max_exact, n_permutations=n_permutations, seed=seed
    )
    outputs = list(output_names) if output_names is not None else model_outputs
    if outputs is None or len(outputs) != phi.shape[1]:
        outputs = [f"y{j}" for j in range(phi.shape[1])]
    return Contributions(
        values=pd.DataFrame(phi, index=pd.Index(names, name="feature"), columns=outputs),
        base=pd.Series(base, index=outputs, name="base"),
        prediction=pd.Series(prediction, index=outputs, name="prediction"),
        method=method,
    )


def explain_features(
    model: Any,
    features: pd.DataFrame,
    background: np.ndarray | None = None,
    *,
    output_names: Sequence[str] | None = None,
    by_criterion: bool = False,
    **options: Any,
) -> dict[Any, Contributions | None]:
    """:func:`contributions` for every row of a feature table, keyed by its index.

    A row with a NaN feature (a failed criterion score) gets None: its aspect scores are NaN
    in production output, so there is nothing to explain.
    """
    out: dict[Any, Contributions | None] = {}
    for sample_id, row in features.iterrows():
        if row.isna().any():
            out[sample_id] = None
            continue
        result = contributions(model, row, background, output_names=output_names, **options)
        out[sample_id] = result.by_criterion() if by_criterion else result
    return out


def explain_scores(
    evaluator: Any, criteria: pd.DataFrame, *, by_criterion: bool = False, **options: Any
) -> dict[Any, dict[str, Any] | None]:
    """JSON-ready explanations of a loaded :class:`~hdeval.evaluator.Evaluator`'s scores.

    ``criteria`` is the criterion-score table of ``evaluator.score_samples(...)``. The bundle's
    ``background.npy`` is used when present (checked against ``background_sha256`` in the card),
    otherwise the median profile. Per sample: ``{"method", "reference", "aspects": {aspect:
    {"base", "prediction", "contributions": {feature or criterion: value}}}}``, or None for a
    row with a failed criterion score.
    """
    names = list(evaluator.feature_names)
    background = load_background(
        evaluator.path, evaluator.card.get("background_sha256"), n_features=len(names)
    )
    found = explain_features(
        evaluator.aggregator,
        criteria[names],
        background,
        output_names=list(evaluator.aspects),
        by_criterion=by_criterion,
        **options,
    )
    reference = "medians" if background is None else f"background ({len(background)} rows)"
    return {
        sample_id: None
        if result is None
        else {"method": result.method, "reference": reference, "aspects": result.to_dict()}
        for sample_id, result in found.items()
    }


# ====================================================================== SHAP (analysis side)
@dataclass
class ShapResult:
    """SHAP explanations of a pipeline, one ``shap.Explanation`` (rows x features) per output."""

    explanations: dict[str, Any]
    explainer: str
    feature_names: list[str]

    @property
    def outputs(self) -> list[str]:
        return list(self.explanations)

    def values(self, output: str) -> pd.DataFrame:
        """SHAP values of one output: rows x features."""
        return pd.DataFrame(self.explanations[output].values, columns=self.feature_names)

    def base_values(self, output: str) -> np.ndarray:
        return np.asarray(self.explanations[output].base_values, dtype=float)

    def mean_abs(self) -> pd.DataFrame:
        """Mean |SHAP| per feature (rows) and output (columns)."""
        return pd.DataFrame(
            {o: np.abs(e.values).mean(axis=0) for o, e in self.explanations.items()},
            index=self.feature_names,
        )


def _import_shap():
    """shap with matplotlib on the Agg backend (shap imports pyplot)."""
    import matplotlib

    matplotlib.use("Agg")
    import shap

    return shap


def _split_pipeline(pipeline: Any) -> tuple[Callable[[np.ndarray], np.ndarray], Any]:
    """(transform of all steps but the last, final estimator); identity for a bare estimator."""
    if hasattr(pipeline, "steps"):
        head, last = pipeline[:-1], pipeline[-1]
        return (head.transform if len(pipeline.steps) > 1 else (lambda a: a)), last
    return (lambda a: a), pipeline


def _is_tree_model(model: Any) -> bool:
    return hasattr(model, "tree_") or (
        hasattr(model, "estimators_") and all(hasattr(e, "tree_") for e in model.estimators_)
    )


def _is_linear_model(model: Any) -> bool:
    return hasattr(model, "coef_") and hasattr(model, "intercept_") and not hasattr(model, "coefs_")


def shap_explanations(
    pipeline: Any,
    X: pd.DataFrame | np.ndarray,
    *,
    background: pd.DataFrame | np.ndarray | None = None,
    feature_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    max_background: int = 50,
    seed: int = 0,
) -> ShapResult:
    """SHAP values of a fitted pipeline on the rows of ``X``, per output.

    The preprocessing steps (imputation, scaling) are applied first and the final estimator is
    explained on their output; the reported feature values are the imputed, unscaled criterion
    scores (scaling is affine per feature and does not change interventional SHAP values).
    ``background`` defaults to a seeded sample of ``X`` of at most ``max_background`` rows.
    """
    shap = _import_shap()
    names = (
        list(feature_names)
        if feature_names is not None
        else [str(c) for c in X.columns]
        if isinstance(X, pd.DataFrame)
        else [f"x{i}" for i in range(np.shape(X)[1])]
    )
    X_raw = np.asarray(X, dtype=np.float64)
    bg_raw = make_background(X_raw if background is None else background, max_background, seed)
    transform, model = _split_pipeline(pipeline)
    X_t, bg_t = transform(X_raw), transform(bg_raw.astype(np.float64))
    impute = getattr(pipeline, "named_steps", {}).get("impute")
    X_shown = impute.transform(X_raw) if impute is not None else X_raw

    if _is_linear_model(model):
        explainer = shap.LinearExplainer(model, bg_t)
        explanation = explainer(X_t)
    elif _is_tree_model(model):
        explainer = shap.TreeExplainer(model, bg_t, feature_perturbation="interventional")
        explanation = explainer(X_t)
    else:
        explainer = shap.Explainer(
            model.predict, shap.maskers.Independent(bg_t, max_samples=len(bg_t)), seed=seed
        )
        explanation = explainer(X_t, silent=True)

    values = np.asarray(explanation.values, dtype=float)
    base = np.asarray(explanation.base_values, dtype=float)
    if values.ndim == 2:
        values = values[:, :, None]
    base = np.broadcast_to(base.reshape(len(X_t), -1), (len(X_t), values.shape[2]))
    n_out = values.shape[2]
    outputs = (
        list(output_names)
        if output_names is not None and len(output_names) == n_out
        else [f"y{j}" for j in range(n_out)]
    )
    explanations = {
        out: shap.Explanation(
            values=values[:, :, j],
            base_values=np.array(base[:, j]),
            data=X_shown,
            feature_names=names,
        )
        for j, out in enumerate(outputs)
    }
    return ShapResult(explanations, type(explainer).__name__, names)


# ====================================================================== plots
def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "output"


def plot_shap(result: ShapResult, out_dir: str | Path, max_display: int = 20) -> dict[str, Path]:
    """Beeswarm and bar PNGs per output: ``shap_beeswarm_<aspect>.png``, ``shap_bar_<aspect>.png``.

    Returns the written paths keyed by ``"beeswarm:<aspect>"`` and ``"bar:<aspect>"``.
    """
    shap = _import_shap()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for output, explanation in result.explanations.items():
        for kind, draw in (("beeswarm", shap.plots.beeswarm), ("bar", shap.plots.bar)):
            plt.close("all")
            draw(explanation, max_display=max_display, show=False)
            figure = plt.gcf()
            figure.suptitle(f"SHAP ({result.explainer}): {output}", fontsize=10)
            path = out_dir / f"shap_{kind}_{_safe_name(output)}.png"
            figure.savefig(path, dpi=120, bbox_inches="tight")
            plt.close(figure)
            written[f"{kind}:{output}"] = path
    return written


def plot_permutation_importance(
    importances: pd.Series,
    path: str | Path,
    *,
    std: pd.Series | None = None,
    top: int = 30,
    title: str = "Permutation importance (held-out)",
) -> Path:
    """Horizontal bar chart of the ``top`` largest importances (optionally with error bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = importances.dropna().sort_values(ascending=False).head(top)[::-1]
    height = max(2.5, 0.3 * len(ranked) + 1.0)
    figure, ax = plt.subplots(figsize=(7, height))
    errors = None if std is None else std.reindex(ranked.index).to_numpy()
    ax.barh([str(i) for i in ranked.index], ranked.to_numpy(), xerr=errors, color="#3b75af")
    ax.axvline(0, color="#333333", linewidth=0.8)
    ax.set_xlabel(f"drop in score when shuffled ({importances.name or 'importance'})")
    ax.set_title(title, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path


def explain_report(
    pipeline: Any,
    X: pd.DataFrame,
    out_dir: str | Path,
    *,
    output_names: Sequence[str] | None = None,
    importances: pd.Series | None = None,
    Y: pd.DataFrame | None = None,
    groups: Sequence | np.ndarray | None = None,
    background: pd.DataFrame | np.ndarray | None = None,
    max_display: int = 20,
    seed: int = 0,
) -> dict[str, Path]:
    """SHAP beeswarm/bar PNGs per aspect and a ``permutation_importance.png``.

    The importances are ``importances`` if given, otherwise held-out permutation importances of
    a clone of ``pipeline`` from :func:`hdeval.pruning.permutation_importances` (needs ``Y`` and
    ``groups``, the documents); with neither, no importance plot is drawn.
    """
    result = shap_explanations(
        pipeline, X, background=background, output_names=output_names, seed=seed
    )
    written = plot_shap(result, out_dir, max_display)
    if importances is None and Y is not None and groups is not None:
        from hdeval.pruning import permutation_importances

        importances = permutation_importances(pipeline, X, Y, groups, seed=seed)
    if importances is not None:
        written["permutation_importance"] = plot_permutation_importance(
            importances, Path(out_dir) / "permutation_importance.png"
        )
    return written
