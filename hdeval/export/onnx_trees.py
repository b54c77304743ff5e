"""The tree ensembles' ONNX converters: scikit-learn's decision trees and random forests and our
monotone ensembles (:mod:`hdeval.training.monotone_trees`) as one ``TreeEnsembleRegressor``
(ai.onnx.ml opset 3) each, with float64 thresholds and leaf values, so the graph sends every row
down the branch scikit-learn does. Registered by
:func:`~hdeval.export.onnx_converters.custom_converters`; onnx is imported inside the functions that
need it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _tree_attributes(
    trees: list, n_outputs: int, weight: float, feeds: list[int] | None = None
) -> dict[str, Any]:
    """TreeEnsembleRegressor (ai.onnx.ml opset 3) attributes with float64 thresholds/leaves:
    each tree feeds every output, or, with ``feeds``, the one output ``feeds[i]`` (a
    single-output tree of a per-aspect forest)."""

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
    return {"n_targets": n_outputs, **_ensemble_attributes(nodes, thresholds, targets)}


def _ensemble_attributes(nodes: dict, thresholds: list[float], targets: dict) -> dict[str, Any]:
    """The attributes a summing TreeEnsembleRegressor takes from its nodes and leaf targets
    (thresholds and weights in float64)."""
    from onnx import numpy_helper

    return {
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


def convert_tree_regressor(scope, operator, container) -> None:
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
    _ensemble_to_output(scope, operator, container, as_f64, summed, attributes)


def _ensemble_to_output(scope, operator, container, features, summed, attributes) -> None:
    """A TreeEnsembleRegressor (ai.onnx.ml v3) of ``attributes`` over ``features`` into
    ``summed``, cast to the operator's float64 output."""
    from onnx import TensorProto

    container.add_node(
        "TreeEnsembleRegressor",
        [features],
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
        "base_values_as_tensor": numpy_helper.from_array(np.array(base, np.float64), "b"),
        **_ensemble_attributes(nodes, thresholds, targets),
    }


def convert_boosting(scope, operator, container) -> None:
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
    attributes = _boosting_attributes(operator.raw_operator)
    _ensemble_to_output(scope, operator, container, as_f64, summed, attributes)
