"""Custom skl2onnx converters and shape calculators for the aggregator pipelines.

skl2onnx converts StandardScaler and Ridge as they are, and our
:class:`~hdeval.training.aggregators.OrientedRidge` with its linear-regressor converter (it has
``coef_``
and ``intercept_`` as Ridge does). Four converters are replaced here, passed per call by
:func:`custom_converters` without touching skl2onnx's global registry: MLPRegressor (skl2onnx
flattens multi-output predictions to one column), DecisionTreeRegressor and RandomForestRegressor
(see :func:`_convert_tree_regressor`), and SimpleImputer (onnxruntime's Imputer operator has no
float64 kernel; it becomes IsNaN + Where). Our monotone ensembles (one per aspect) are added: a
:class:`~hdeval.training.monotone_trees.MonotoneForest` goes through the forest's converter,
each tree feeding its own aspect; a ``MonotoneBoosting`` through :func:`_convert_boosting`.

scikit-learn, skl2onnx and onnx are imported inside the functions that need them: importing this
module needs only numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hdeval.errors import HDEvalError

_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "logistic": "Sigmoid", "identity": "Identity"}


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


def _tree_attributes(
    trees: list, n_outputs: int, weight: float, feeds: list[int] | None = None
) -> dict[str, Any]:
    """TreeEnsembleRegressor (ai.onnx.ml opset 3) attributes with float64 thresholds/leaves:
    each tree feeds every output, or, with ``feeds``, the one output ``feeds[i]`` (a
    single-output tree of a per-aspect forest)."""
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
            outputs = range(n_outputs) if feeds is None else (feeds[tree_id],)
            for slot, output in enumerate(outputs) if leaf else ():
                targets["tree"].append(tree_id)
                targets["node"].append(node_id)
                targets["id"].append(output)
                targets["weight"].append(float(tree.value[node_id, slot, 0]) * weight)
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

    from hdeval.training.monotone_trees import MonotoneForest

    model = operator.raw_operator
    if isinstance(model, MonotoneForest):  # a forest per output, each tree feeding its own
        forests = [forest.estimators_ for forest in model.estimators_]
        trees = [tree.tree_ for forest in forests for tree in forest]
        feeds = [output for output, forest in enumerate(forests) for _ in forest]
        attributes = _tree_attributes(trees, len(forests), 1.0 / len(forests[0]), feeds)
    else:
        trees = [e.tree_ for e in getattr(model, "estimators_", [model])]
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


def _boosting_attributes(model) -> dict[str, Any]:
    """TreeEnsembleRegressor (ai.onnx.ml v3) attributes of a :class:`MonotoneBoosting`: every
    tree of every output's ``HistGradientBoostingRegressor`` with float64 thresholds and leaf
    values (shrinkage already applied), and each output's baseline as its base value."""
    from onnx import numpy_helper

    nodes: dict[str, list] = {k: [] for k in ("tree", "node", "feature", "mode", "true", "false")}
    targets: dict[str, list] = {k: [] for k in ("tree", "node", "id", "weight")}
    thresholds: list[float] = []
    tree_id = 0
    for output, estimator in enumerate(model.estimators_):
        for (predictor,) in estimator._predictors:
            for node_id, node in enumerate(predictor.nodes):
                leaf = bool(node["is_leaf"])
                nodes["tree"].append(tree_id)
                nodes["node"].append(node_id)
                nodes["feature"].append(0 if leaf else int(node["feature_idx"]))
                nodes["mode"].append("LEAF" if leaf else "BRANCH_LEQ")
                nodes["true"].append(0 if leaf else int(node["left"]))
                nodes["false"].append(0 if leaf else int(node["right"]))
                thresholds.append(0.0 if leaf else float(node["num_threshold"]))
                if leaf:
                    targets["tree"].append(tree_id)
                    targets["node"].append(node_id)
                    targets["id"].append(output)
                    targets["weight"].append(float(node["value"]))
            tree_id += 1
    base = [float(np.ravel(e._baseline_prediction)[0]) for e in model.estimators_]
    return {
        "n_targets": len(model.estimators_),
        "post_transform": "NONE",
        "aggregate_function": "SUM",
        "base_values_as_tensor": numpy_helper.from_array(np.array(base, np.float64), "b"),
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


def _convert_boosting(scope, operator, container) -> None:
    """Gradient-boosted trees, compared in float64 as scikit-learn compares them (the sum comes
    out of onnxruntime in float32, as the other trees' does)."""
    from onnx import TensorProto

    as_f64 = scope.get_unique_variable_name("boost_x_f64")
    summed = scope.get_unique_variable_name("boost_y_f32")
    container.add_node(
        "Cast",
        [operator.inputs[0].full_name],
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
        **_boosting_attributes(operator.raw_operator),
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


def custom_converters() -> tuple[dict, dict]:
    """(converters, shape calculators) by estimator class, for ``skl2onnx.convert_sklearn``."""
    from skl2onnx.operator_converters.linear_regressor import convert_sklearn_linear_regressor
    from skl2onnx.shape_calculators.linear_regressor import (
        calculate_linear_regressor_output_shapes,
    )
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.neural_network import MLPRegressor
    from sklearn.tree import DecisionTreeRegressor

    from hdeval.training.aggregators import OrientedRidge
    from hdeval.training.monotone_trees import MonotoneBoosting, MonotoneForest

    shapes = {
        OrientedRidge: calculate_linear_regressor_output_shapes,
        MonotoneBoosting: _tree_shape,
        MonotoneForest: _tree_shape,
        DecisionTreeRegressor: _tree_shape,
        RandomForestRegressor: _tree_shape,
        MLPRegressor: _mlp_shape,
    }
    converters = {
        OrientedRidge: convert_sklearn_linear_regressor,
        MLPRegressor: _convert_mlp_regressor,
        SimpleImputer: _convert_simple_imputer,
        DecisionTreeRegressor: _convert_tree_regressor,
        RandomForestRegressor: _convert_tree_regressor,
        MonotoneBoosting: _convert_boosting,
        MonotoneForest: _convert_tree_regressor,
    }
    return converters, shapes
