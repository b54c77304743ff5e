"""Custom skl2onnx converters and shape calculators for the aggregator pipelines.

skl2onnx converts StandardScaler and Ridge as they are, and our
:class:`~hdeval.training.aggregators.OrientedRidge` with its linear-regressor converter (it has
``coef_``
and ``intercept_`` as Ridge does). Four converters are replaced here, passed per call by
:func:`custom_converters` without touching skl2onnx's global registry: MLPRegressor (skl2onnx
flattens multi-output predictions to one column), DecisionTreeRegressor and RandomForestRegressor
(see :mod:`hdeval.export.onnx_trees`), and SimpleImputer (onnxruntime's Imputer operator has no
float64 kernel; it becomes IsNaN + Where). Our monotone ensembles (one per aspect) are added: a
:class:`~hdeval.training.monotone_trees.MonotoneForest` goes through the forest's converter,
each tree feeding its own aspect; a ``MonotoneBoosting`` through ``onnx_trees.convert_boosting``.

scikit-learn, skl2onnx and onnx are imported inside the functions that need them: importing this
module needs only numpy.
"""

from __future__ import annotations

import numpy as np

from hdeval.errors import HDEvalError
from hdeval.export.onnx_trees import convert_boosting, convert_tree_regressor

_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "logistic": "Sigmoid", "identity": "Identity"}


def _output_shape(operator, double: bool) -> None:
    """Declare the output [N, n_outputs_] (float64 if ``double``, else float32)."""
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType

    tensor_type = DoubleTensorType if double else FloatTensorType
    n_outputs = int(getattr(operator.raw_operator, "n_outputs_", 1))
    first = operator.inputs[0].get_first_dimension()
    operator.outputs[0].type = tensor_type([first, n_outputs])


def _tree_shape(operator) -> None:
    """Trees: float64 output (see :func:`~hdeval.export.onnx_trees.convert_tree_regressor`)."""
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
        DecisionTreeRegressor: convert_tree_regressor,
        RandomForestRegressor: convert_tree_regressor,
        MonotoneBoosting: convert_boosting,
        MonotoneForest: convert_tree_regressor,
    }
    return converters, shapes
