"""Export a fitted aggregator pipeline to ONNX and prove it predicts what scikit-learn predicts.

The exported graph takes one float32 input named "features" of shape [None, n_features], casts
it to float64 and returns predictions of shape [None, n_outputs]. Computing in float64 keeps
linear models and MLPs within about 1e-12 of scikit-learn; trees use scikit-learn's own float64
thresholds and leaf values (ai.onnx.ml opset 3 tensor attributes) and are off only by one final
float32 rounding (about 1e-7 relative).

skl2onnx converts StandardScaler and Ridge as they are. Four converters are replaced
here, per call and without touching skl2onnx's global registry: MLPRegressor (skl2onnx flattens
multi-output predictions to one column), DecisionTreeRegressor and RandomForestRegressor (see
:func:`_convert_tree_regressor`), and SimpleImputer (onnxruntime's Imputer operator has no
float64 kernel; it becomes IsNaN + Where).

After writing, the file is loaded with onnxruntime and its predictions are compared with
``pipeline.predict`` on a sample matrix plus NaN-masked rows; a difference above ``atol`` raises
:class:`~hdeval.errors.HDEvalError` and leaves no file behind. A few of those rows and their
scikit-learn predictions are stored in the model metadata, so that :class:`OnnxAggregator` can
check the file again whenever it is loaded.

scikit-learn, skl2onnx and onnx are imported inside the functions that need them: importing this
module (or :mod:`hdeval.onnx_runtime`) needs only numpy and onnxruntime.
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
from hdeval.onnx_runtime import INPUT_NAME, META_PREFIX, OnnxAggregator, encode_rows

__all__ = ["DEFAULT_ATOL", "TARGET_OPSET", "OnnxAggregator", "export_onnx", "parity_sample"]

DEFAULT_ATOL = 1e-5
#: Pinned opsets, so that a file loads in any onnxruntime from 1.17 on.
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
N_PROBE_ROWS = 16

_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "logistic": "Sigmoid", "identity": "Identity"}


# ---------------------------------------------------------------------- skl2onnx extensions
def _output_shape(operator, double: bool) -> None:
    """Declare the output [N, n_outputs_] (float64 if ``double``, else float32)."""
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType

    tensor_type = DoubleTensorType if double else FloatTensorType
    n_outputs = int(getattr(operator.raw_operator, "n_outputs_", 1))
    first = operator.inputs[0].get_first_dimension()
    operator.outputs[0].type = tensor_type([first, n_outputs])


def _tree_shape(operator) -> None:
    """Trees: float64 output (see :func:`_convert_tree_regressor`)."""
    _output_shape(operator, double=True)


def _mlp_shape(operator) -> None:
    """MLP: the input's float type."""
    from skl2onnx.common.data_types import DoubleTensorType

    _output_shape(operator, double=isinstance(operator.inputs[0].type, DoubleTensorType))


def _convert_mlp_regressor(scope, operator, container) -> None:
    """MLPRegressor forward pass (MatMul, Add, activation per layer) keeping every output."""
    from onnx import TensorProto
    from skl2onnx.common.data_types import DoubleTensorType

    model = operator.raw_operator
    double = isinstance(operator.inputs[0].type, DoubleTensorType)
    proto, dtype = (TensorProto.DOUBLE, np.float64) if double else (TensorProto.FLOAT, np.float32)
    current = operator.inputs[0].full_name
    last = len(model.coefs_) - 1
    for i, (weights, bias) in enumerate(zip(model.coefs_, model.intercepts_, strict=True)):
        w_name = scope.get_unique_variable_name(f"mlp_w{i}")
        b_name = scope.get_unique_variable_name(f"mlp_b{i}")
        container.add_initializer(w_name, proto, list(weights.shape), weights.astype(dtype).ravel())
        container.add_initializer(b_name, proto, list(bias.shape), bias.astype(dtype).ravel())
        product = scope.get_unique_variable_name(f"mlp_mm{i}")
        summed = scope.get_unique_variable_name(f"mlp_add{i}")
        container.add_node(
            "MatMul", [current, w_name], [product], name=scope.get_unique_operator_name("MatMul")
        )
        container.add_node(
            "Add", [product, b_name], [summed], name=scope.get_unique_operator_name("Add")
        )
        activation = model.out_activation_ if i == last else model.activation
        if activation not in _ACTIVATIONS:
            raise HDEvalError(f"MLP activation {activation!r} cannot be exported")
        target = (
            operator.outputs[0].full_name
            if i == last
            else scope.get_unique_variable_name(f"mlp_act{i}")
        )
        container.add_node(
            _ACTIVATIONS[activation], [summed], [target], name=scope.get_unique_operator_name("Act")
        )
        current = target


def _tree_attributes(trees: list, n_outputs: int, weight: float) -> dict[str, Any]:
    """TreeEnsembleRegressor (ai.onnx.ml opset 3) attributes with float64 thresholds/leaves."""
    from onnx import numpy_helper

    nodes: dict[str, list] = {k: [] for k in ("tree", "node", "feature", "mode", "true", "false")}
    thresholds: list[float] = []
    targets: dict[str, list] = {k: [] for k in ("tree", "node", "id", "weight")}
    for tree_id, tree in enumerate(trees):
        for node_id in range(tree.node_count):
            leaf = tree.children_left[node_id] == -1
            nodes["tree"].append(tree_id)
            nodes["node"].append(node_id)
            nodes["feature"].append(0 if leaf else int(tree.feature[node_id]))
            nodes["mode"].append("LEAF" if leaf else "BRANCH_LEQ")
            nodes["true"].append(0 if leaf else int(tree.children_left[node_id]))
            nodes["false"].append(0 if leaf else int(tree.children_right[node_id]))
            thresholds.append(0.0 if leaf else float(tree.threshold[node_id]))
            for output in range(n_outputs) if leaf else ():
                targets["tree"].append(tree_id)
                targets["node"].append(node_id)
                targets["id"].append(output)
                targets["weight"].append(float(tree.value[node_id, output, 0]) * weight)
    return {
        "n_targets": n_outputs,
        "post_transform": "NONE",
        "aggregate_function": "SUM",
        "nodes_treeids": nodes["tree"],
        "nodes_nodeids": nodes["node"],
        "nodes_featureids": nodes["feature"],
        "nodes_modes": nodes["mode"],
        "nodes_truenodeids": nodes["true"],
        "nodes_falsenodeids": nodes["false"],
        "nodes_missing_value_tracks_true": [0] * len(nodes["tree"]),
        "nodes_values_as_tensor": numpy_helper.from_array(np.array(thresholds, np.float64), "t"),
        "target_treeids": targets["tree"],
        "target_nodeids": targets["node"],
        "target_ids": targets["id"],
        "target_weights_as_tensor": numpy_helper.from_array(
            np.array(targets["weight"], np.float64), "w"
        ),
    }


def _convert_tree_regressor(scope, operator, container) -> None:
    """Decision tree or random forest, compared exactly as scikit-learn does.

    scikit-learn casts the features to float32 and compares them with float64 thresholds; the
    graph does the same (Cast to float32 and back, then float64 thresholds and leaf values, summed
    in float64 and rounded to float32 once). skl2onnx's converter emits ai.onnx.ml opset 1 with
    float32 thresholds and leaf values: fed the float64 imputed features, it can send a row down
    another branch than scikit-learn does (seen: 1e-2 off on a 400-tree forest); fed float32, it
    sums the leaves in float32 (several 1e-6 off on a 100-tree forest).
    """
    from onnx import TensorProto

    model = operator.raw_operator
    trees = [e.tree_ for e in model.estimators_] if hasattr(model, "estimators_") else [model.tree_]
    attributes = _tree_attributes(trees, int(model.n_outputs_), 1.0 / len(trees))
    as_f32 = scope.get_unique_variable_name("tree_x_f32")
    as_f64 = scope.get_unique_variable_name("tree_x_f64")
    summed = scope.get_unique_variable_name("tree_y_f32")
    source = operator.inputs[0].full_name
    container.add_node(
        "Cast",
        [source],
        [as_f32],
        to=TensorProto.FLOAT,
        name=scope.get_unique_operator_name("Cast"),
    )
    container.add_node(
        "Cast",
        [as_f32],
        [as_f64],
        to=TensorProto.DOUBLE,
        name=scope.get_unique_operator_name("Cast"),
    )
    container.add_node(
        "TreeEnsembleRegressor",
        [as_f64],
        [summed],
        op_domain="ai.onnx.ml",
        op_version=3,
        name=scope.get_unique_operator_name("TreeEnsembleRegressor"),
        **attributes,
    )
    container.add_node(
        "Cast",
        [summed],
        [operator.outputs[0].full_name],
        to=TensorProto.DOUBLE,
        name=scope.get_unique_operator_name("Cast"),
    )


def _convert_simple_imputer(scope, operator, container) -> None:
    """SimpleImputer on NaN as ``Where(IsNaN(x), statistics, x)``, in the input's float type."""
    from onnx import TensorProto
    from skl2onnx.common.data_types import DoubleTensorType

    imputer = operator.raw_operator
    statistics = np.asarray(imputer.statistics_, dtype=np.float64)
    missing = imputer.missing_values
    if not (isinstance(missing, float) and np.isnan(missing)) or imputer.add_indicator:
        raise HDEvalError("only SimpleImputer(missing_values=nan, add_indicator=False) is exported")
    if np.isnan(statistics).any():
        raise HDEvalError(
            "SimpleImputer drops empty features; fit it with keep_empty_features=True"
        )
    double = isinstance(operator.inputs[0].type, DoubleTensorType)
    proto, dtype = (TensorProto.DOUBLE, np.float64) if double else (TensorProto.FLOAT, np.float32)
    stats_name = scope.get_unique_variable_name("imputer_statistics")
    container.add_initializer(stats_name, proto, [len(statistics)], statistics.astype(dtype))
    is_nan = scope.get_unique_variable_name("imputer_isnan")
    source = operator.inputs[0].full_name
    container.add_node("IsNaN", [source], [is_nan], name=scope.get_unique_operator_name("IsNaN"))
    container.add_node(
        "Where",
        [is_nan, stats_name, source],
        [operator.outputs[0].full_name],
        name=scope.get_unique_operator_name("Where"),
    )


def _custom_converters() -> tuple[dict, dict]:
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.neural_network import MLPRegressor
    from sklearn.tree import DecisionTreeRegressor

    shapes = {
        DecisionTreeRegressor: _tree_shape,
        RandomForestRegressor: _tree_shape,
        MLPRegressor: _mlp_shape,
    }
    converters = {
        MLPRegressor: _convert_mlp_regressor,
        SimpleImputer: _convert_simple_imputer,
        DecisionTreeRegressor: _convert_tree_regressor,
        RandomForestRegressor: _convert_tree_regressor,
    }
    return converters, shapes


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

    converters, shapes = _custom_converters()
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
