"""Export a fitted aggregator pipeline to ONNX and prove it predicts what scikit-learn predicts.

The exported graph takes one float32 input named "features" of shape [None, n_features], casts
it to float64 and returns predictions of shape [None, n_outputs]. Computing in float64 keeps
linear models and MLPs within about 1e-12 of scikit-learn; trees use scikit-learn's own float64
thresholds and leaf values (ai.onnx.ml opset 3 tensor attributes) and are off only by one final
float32 rounding (about 1e-7 relative).

The pipeline is converted by skl2onnx with the custom converters of
:mod:`hdeval.export.onnx_converters`
(MLPs, trees and forests, SimpleImputer, :class:`~hdeval.training.aggregators.OrientedRidge`).

After writing, the file is loaded with onnxruntime and its predictions are compared with
``pipeline.predict`` on a sample matrix plus NaN-masked rows; a difference above ``atol`` raises
:class:`~hdeval.errors.HDEvalError` and leaves no file behind. A few of those rows and their
scikit-learn predictions are stored in the model metadata, so that :class:`OnnxAggregator` can
check the file again whenever it is loaded.

scikit-learn, skl2onnx and onnx are imported inside the functions that need them: importing this
module (or :mod:`hdeval.export.onnx_runtime`) needs only numpy and onnxruntime.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hdeval.errors import HDEvalError
from hdeval.export.onnx_converters import custom_converters
from hdeval.export.onnx_runtime import INPUT_NAME, META_PREFIX, OnnxAggregator, encode_rows

__all__ = ["DEFAULT_ATOL", "TARGET_OPSET", "OnnxAggregator", "export_onnx", "parity_sample"]

DEFAULT_ATOL = 1e-5
#: Pinned opsets, so that a file loads in any onnxruntime from 1.17 on.
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
N_PROBE_ROWS = 16


# ---------------------------------------------------------------------- conversion
def _float32_entry(model, n_features: int) -> None:
    """Make the graph's input the float32 "features", cast to the float64 input it was built on."""
    from onnx import TensorProto, helper

    (inner,) = model.graph.input
    cast = helper.make_node(
        "Cast", [INPUT_NAME], [inner.name], to=TensorProto.DOUBLE, name="hdeval_features_to_f64"
    )
    model.graph.node.insert(0, cast)
    del model.graph.input[:]
    model.graph.input.append(
        helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [None, n_features])
    )


def to_onnx_model(pipeline: Any, n_features: int, metadata: dict[str, str] | None = None):
    """Convert a fitted pipeline to an ``onnx.ModelProto``: float32 "features" in, float64 out."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DoubleTensorType

    converters, shapes = custom_converters()
    try:
        model = convert_sklearn(
            pipeline,
            initial_types=[(INPUT_NAME + "_f64", DoubleTensorType([None, n_features]))],
            target_opset=TARGET_OPSET,
            custom_conversion_functions=converters,
            custom_shape_calculators=shapes,
        )
    except Exception as exc:  # skl2onnx raises assorted errors for unsupported models
        raise HDEvalError(f"cannot convert {type(pipeline).__name__} to ONNX: {exc}") from exc
    _float32_entry(model, n_features)
    model.doc_string = "hdeval aggregator: criterion scores -> human scores"
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


# ---------------------------------------------------------------------- parity sample
def parity_sample(pipeline: Any, n_features: int, n_rows: int = 64, seed: int = 0) -> np.ndarray:
    """A synthetic sample around the imputer's medians (or 0), spread 1, for the parity check."""
    imputer = getattr(pipeline, "named_steps", {}).get("impute")
    center = getattr(imputer, "statistics_", None)
    center = np.zeros(n_features) if center is None else np.asarray(center, dtype=float)
    rng = np.random.default_rng(seed)
    return center + rng.normal(size=(n_rows, n_features))


def _with_nan_rows(sample: np.ndarray, seed: int = 0) -> np.ndarray:
    """``sample`` followed by an all-NaN row and NaN-masked copies of its first rows."""
    rng = np.random.default_rng(seed)
    head = sample[: min(len(sample), 8)].copy()
    head[rng.random(head.shape) < 0.3] = np.nan
    all_nan = np.full((1, sample.shape[1]), np.nan)
    return np.vstack([sample, all_nan, head])


def _probe_rows(sample: np.ndarray) -> np.ndarray:
    """Probe rows stored in the file: the first rows of the sample and the NaN rows at its end."""
    half = N_PROBE_ROWS // 2
    return np.vstack([sample[:half], sample[-half:]]) if len(sample) > N_PROBE_ROWS else sample


def _reference(pipeline: Any, sample32: np.ndarray) -> np.ndarray:
    return np.asarray(pipeline.predict(sample32.astype(np.float64)), dtype=np.float64).reshape(
        len(sample32), -1
    )


def _max_difference(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b), initial=0.0))


# ---------------------------------------------------------------------- export
def export_onnx(
    pipeline: Any,
    n_features: int,
    path: str | Path,
    sample: np.ndarray | None = None,
    *,
    feature_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    atol: float = DEFAULT_ATOL,
) -> None:
    """Write a fitted pipeline to ``path`` as ONNX, after checking it against scikit-learn.

    ``sample`` (n_rows x n_features) is the matrix to compare on; by default a synthetic one from
    :func:`parity_sample`. NaN-masked rows are always added. Both sides see the sample rounded to
    float32, the input type of the graph (which then computes in float64). If onnxruntime's
    predictions differ from ``pipeline.predict`` by more than ``atol`` anywhere,
    :class:`~hdeval.errors.HDEvalError` names the largest difference and nothing is written.
    ``feature_names`` and ``output_names`` are
    stored in the file's metadata.
    """
    path = Path(path)
    if feature_names is not None and len(feature_names) != n_features:
        raise HDEvalError(f"{len(feature_names)} feature names for {n_features} features")
    sample = parity_sample(pipeline, n_features) if sample is None else np.asarray(sample, float)
    if sample.ndim != 2 or sample.shape[1] != n_features:
        raise HDEvalError(f"parity sample has shape {sample.shape}, expected (n, {n_features})")
    sample32 = _with_nan_rows(sample).astype(np.float32)
    expected = _reference(pipeline, sample32)
    probe = _probe_rows(sample32)
    metadata = {
        META_PREFIX + "probe_inputs": encode_rows(probe),
        META_PREFIX + "probe_outputs": encode_rows(_reference(pipeline, probe)),
        META_PREFIX + "atol": repr(float(atol)),
    }
    if feature_names is not None:
        metadata[META_PREFIX + "feature_names"] = json.dumps(list(map(str, feature_names)))
    if output_names is not None:
        metadata[META_PREFIX + "output_names"] = json.dumps(list(map(str, output_names)))
    model = to_onnx_model(pipeline, n_features, metadata)

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    umask = os.umask(0o022)
    os.umask(umask)
    os.fchmod(handle, 0o666 & ~umask)  # as open() would: mkstemp makes the file 0600
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(model.SerializeToString())
        got = OnnxAggregator(tmp, verify=False).predict(sample32)
        diff = _max_difference(got, expected)
        if not diff <= atol:
            raise HDEvalError(
                f"ONNX export of {type(pipeline).__name__} to {path} disagrees with scikit-learn: "
                f"max abs difference {diff:.3g} > {atol:g} (shapes {got.shape} vs {expected.shape})"
            )
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
