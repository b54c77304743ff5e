"""Training-side explanations: SHAP values of a fitted scikit-learn aggregator per aspect, beeswarm
and bar plots, and the permutation-importance chart (shap, matplotlib and scikit-learn are
imported inside the functions).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from hdeval.explain.runtime import make_background
from hdeval.scoring.columns import describe


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


def _float32_thresholds(model: Any) -> Any:
    """A copy of a scikit-learn tree or forest whose split thresholds are each rounded down to
    the nearest float32: the same predictions, and the same paths in SHAP's tree algorithm.

    scikit-learn compares float32 features with float64 thresholds; SHAP's interventional
    algorithm narrows both to float32, so a feature between a threshold and its float32
    rounding (a ratio like 2/3 next to a midpoint of float32 values) takes the other branch
    there, and the SHAP values of that row no longer add up to its prediction (off by 0.05 on
    an SFHOT forest). The largest float32 not above a threshold sends every float32 feature
    where the threshold does. Any other model (gradient boosting's binned trees compare in
    float64 throughout) is returned as it is."""
    if not _is_tree_model(model):
        return model
    model = copy.deepcopy(model)
    for tree in getattr(model, "estimators_", [model]):
        thresholds = tree.tree_.threshold  # a writable view of the tree's own array
        narrowed = thresholds.astype(np.float32)
        above = narrowed.astype(np.float64) > thresholds
        narrowed[above] = np.nextafter(narrowed[above], np.float32(-np.inf))
        thresholds[:] = narrowed
    return model


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
    from hdeval.training.monotone_trees import PerOutput

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
        explainer = shap.TreeExplainer(
            _float32_thresholds(model), bg_t, feature_perturbation="interventional"
        )
        explanation = explainer(X_t)
    elif isinstance(model, PerOutput):  # an ensemble per output, each explained exactly
        explainers = [
            shap.TreeExplainer(
                _float32_thresholds(ensemble), bg_t, feature_perturbation="interventional"
            )
            for ensemble in model.estimators_
        ]
        explainer, parts = explainers[0], [each(X_t) for each in explainers]
        explanation = SimpleNamespace(
            values=np.stack([p.values for p in parts], axis=2),
            base_values=np.stack([np.broadcast_to(p.base_values, len(X_t)) for p in parts], 1),
        )
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
    table: str | Path | None = None,
) -> dict[str, Path]:
    """SHAP beeswarm/bar PNGs per aspect (features named in words) and a
    ``permutation_importance.png`` in ``out_dir``; with ``table``, that CSV gets the mean |SHAP|
    per feature column and aspect, with what each column measures.

    The importances are ``importances`` if given, otherwise held-out permutation importances of
    a clone of ``pipeline`` from :func:`hdeval.training.pruning.permutation_importances` (needs
    ``Y`` and
    ``groups``, the documents); with neither, no importance plot is drawn.
    """
    named = [f"{describe(str(c))} ({c})" for c in X.columns]  # the charts say what it is
    result = shap_explanations(
        pipeline,
        X,
        background=background,
        feature_names=named,
        output_names=output_names,
        seed=seed,
    )
    written = plot_shap(result, out_dir, max_display)
    if table is not None:
        mean_abs = result.mean_abs()
        mean_abs.index = pd.Index([str(c) for c in X.columns], name="feature")
        mean_abs.insert(0, "meaning", [describe(str(c)) for c in X.columns])
        mean_abs.to_csv(table)
        written["mean_abs_shap"] = Path(table)
    if importances is None and Y is not None and groups is not None:
        from hdeval.training.pruning import permutation_importances

        importances = permutation_importances(pipeline, X, Y, groups, seed=seed)
    if importances is not None:
        written["permutation_importance"] = plot_permutation_importance(
            importances, Path(out_dir) / "permutation_importance.png"
        )
    return written
