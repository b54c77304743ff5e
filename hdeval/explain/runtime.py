"""Production explanations (``hdeval score --explain``): each predicted aspect score split into
a base value plus one contribution per feature column (interventional Shapley values against the
bundle's background rows). numpy and the ONNX aggregator only; see :mod:`hdeval.explain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hdeval.errors import HDEvalError, ModelIntegrityError
from hdeval.explain.shapley import (
    MAX_EXACT_FEATURES,
    N_PERMUTATIONS,
    Predict,
    interventional_shapley,
)
from hdeval.scoring.columns import group_of

if TYPE_CHECKING:
    import pandas as pd

#: File name of the background matrix inside a bundle.
BACKGROUND = "background.npy"
#: Default number of background rows kept from the training features.
BACKGROUND_ROWS = 32


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
    from hdeval.paths import sha256_file

    path = Path(bundle) / BACKGROUND
    if not path.is_file():
        if expected_sha256 is not None:
            raise ModelIntegrityError(f"{path} is listed in the card but missing")
        return None
    if expected_sha256 is not None and sha256_file(path) != expected_sha256:
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


# ====================================================================== contributions
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
        """Contributions summed per criterion (``prompt:x``, ``lik:x`` and ``lik.p10:x`` become
        ``x``) and per signal of the text, named in words
        (:func:`~hdeval.scoring.columns.group_of`)."""
        import pandas as pd

        groups = pd.Index([group_of(str(c)) for c in self.values.index], name="criterion")
        summed = self.values.groupby(groups, sort=False).sum()
        return Contributions(summed, self.base.copy(), self.prediction.copy(), self.method)

    def clipped(self, ranges: Mapping[str, Sequence[float]] | None) -> Contributions:
        """The contributions of the prediction as reported: where an output was clipped to its
        range (:func:`~hdeval.scales.clip_to_ranges`), one more contribution, named after the
        range, takes it there, so base + contributions = the reported score."""
        from hdeval.scales import clip_to_ranges

        outputs = list(self.prediction.index)
        reported = clip_to_ranges(self.prediction.to_numpy()[None], outputs, ranges)[0]
        change = reported - self.prediction.to_numpy()
        if not change.any():
            return self
        values = self.values.copy()
        for output, delta in zip(outputs, change, strict=True):
            if delta:
                low, high = (ranges or {})[output]
                values.loc[f"clipped to the range [{low:g}, {high:g}]", output] = delta
        prediction = self.prediction.copy()
        prediction[:] = reported
        return Contributions(values, self.base.copy(), prediction, self.method)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """JSON-ready: ``{output: {"base", "prediction", "contributions": {feature: value}}}``."""
        return {
            str(output): {
                "base": float(self.base[output]),
                "prediction": float(self.prediction[output]),
                "contributions": {
                    str(f): float(v) for f, v in self.values[output].items() if not np.isnan(v)
                },
            }
            for output in self.values.columns
        }


def _as_predict(model: Any) -> tuple[Predict, list[str] | None, list[str] | None]:
    """A prediction function for an ONNX aggregator (anything with ``predict``,
    ``feature_names`` and ``output_names``), a fitted estimator or a callable."""
    if hasattr(model, "predict") and hasattr(model, "output_names"):
        return model.predict, model.feature_names, model.output_names
    if hasattr(model, "predict"):
        names = getattr(model, "feature_names_in_", None)
        return model.predict, None if names is None else [str(n) for n in names], None
    if callable(model):
        return model, None, None
    raise HDEvalError(f"cannot explain a {type(model).__name__}: it has no predict()")


def _as_row(features_row: Any, names: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    """The row as a float vector in the model's feature order, and the feature names."""
    import pandas as pd

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

    ``model`` is an :class:`~hdeval.export.onnx_runtime.OnnxAggregator`, a fitted scikit-learn
    pipeline or a prediction callable. ``background`` holds training
    feature rows (see :func:`make_background`); None means one all-NaN row, i.e. the pipeline's
    median imputation (only for models that impute NaN). Names default to those recorded in
    the ONNX file (or ``x0..``, ``y0..``).
    """
    import pandas as pd

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
    """JSON-ready explanations of a loaded :class:`~hdeval.export.evaluator.Evaluator`'s scores, of
    the scores as it reports them (clipped to each aspect's range: :meth:`Contributions.clipped`).

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
    ranges = evaluator.card.get("score_ranges")
    return {
        sample_id: None
        if result is None
        else {
            "method": result.method,
            "reference": reference,
            "aspects": result.clipped(ranges).to_dict(),
        }
        for sample_id, result in found.items()
    }
