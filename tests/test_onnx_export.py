"""ONNX export: parity with scikit-learn (NaNs included), integrity errors, runtime-only import."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import numpy_helper

from hdeval.errors import HDEvalError, ModelIntegrityError
from hdeval.export.onnx_export import OnnxAggregator, export_onnx
from hdeval.training.aggregators import KINDS, make_aggregator

REPO = Path(__file__).resolve().parents[1]
N_FEATURES, N_OUTPUTS = 12, 3
FAST = {"forest": {"n_estimators": 20}}


def synthetic(n: int = 240, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 5, size=(n, N_FEATURES))
    W = rng.normal(size=(N_FEATURES, N_OUTPUTS))
    Y = 0.2 * X @ W + np.sin(X[:, :N_OUTPUTS]) + rng.normal(scale=0.1, size=(n, N_OUTPUTS))
    X[rng.random(X.shape) < 0.1] = np.nan
    return X, Y


@pytest.fixture(scope="module")
def fitted() -> dict:
    X, Y = synthetic()
    return {k: make_aggregator(k, **FAST.get(k, {})).fit(X[:200], Y[:200]) for k in KINDS}


@pytest.fixture(scope="module")
def exported(fitted, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("onnx")
    X, _ = synthetic()
    paths = {}
    for kind, pipeline in fitted.items():
        paths[kind] = folder / f"{kind}.onnx"
        export_onnx(pipeline, N_FEATURES, paths[kind], X[:60], output_names=["a", "b", "c"])
    return paths


@pytest.mark.parametrize("kind", KINDS)
def test_onnx_matches_sklearn_including_nan_rows(kind, fitted, exported) -> None:
    X, _ = synthetic(seed=1)
    X[:5] = np.nan  # rows whose every criterion score failed
    X[5:10, 0] = np.nan
    aggregator = OnnxAggregator(exported[kind])
    expected = fitted[kind].predict(X.astype(np.float32).astype(np.float64))
    got = aggregator.predict(X)
    assert got.shape == (len(X), N_OUTPUTS) and got.dtype == np.float64
    assert np.max(np.abs(got - expected)) <= 1e-5
    assert aggregator.n_features == N_FEATURES and aggregator.n_outputs == N_OUTPUTS
    assert aggregator.output_names == ["a", "b", "c"] and aggregator.feature_names is None
    one = aggregator.predict(X[7])  # a single row, 1-D
    np.testing.assert_allclose(one, got[7:8], atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_graph_signature(kind, exported) -> None:
    session = ort.InferenceSession(str(exported[kind]), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert inp.name == "features" and inp.type == "tensor(float)"
    assert inp.shape[1] == N_FEATURES and not isinstance(inp.shape[0], int)
    assert session.get_outputs()[0].shape[1] == N_OUTPUTS


def test_single_output_and_all_nan_training_column(tmp_path) -> None:
    X, Y = synthetic()
    X[:, 3] = np.nan
    for kind in KINDS:
        pipeline = make_aggregator(kind, **FAST.get(kind, {})).fit(X, Y[:, 0])
        path = tmp_path / f"{kind}.onnx"
        export_onnx(pipeline, N_FEATURES, path)  # default synthetic parity sample
        got = OnnxAggregator(path).predict(X)
        assert got.shape == (len(X), 1)
        expected = pipeline.predict(X.astype(np.float32).astype(np.float64))
        assert np.max(np.abs(got[:, 0] - expected)) <= 1e-5


def test_feature_names_select_dataframe_columns(fitted, tmp_path) -> None:
    names = [f"prompt:c{i}" for i in range(N_FEATURES)]
    path = tmp_path / "named.onnx"
    export_onnx(fitted["linear"], N_FEATURES, path, feature_names=names)
    aggregator = OnnxAggregator(path)
    assert aggregator.feature_names == names
    X, _ = synthetic(n=20, seed=3)
    frame = pd.DataFrame(X, columns=names)
    reordered = frame[names[::-1]]
    np.testing.assert_array_equal(aggregator.predict(reordered), aggregator.predict(X))
    with pytest.raises(HDEvalError, match="lacks feature columns"):
        aggregator.predict(frame.drop(columns=names[0]))
    with pytest.raises(HDEvalError, match=f"expected {N_FEATURES} features"):
        aggregator.predict(X[:, :5])


@pytest.mark.parametrize("kind", ["forest", "boosting"])
def test_monotone_ensembles_export_with_parity(kind, tmp_path) -> None:
    """One monotone ensemble per aspect (``aggregator.nonnegative``): each aspect's trees feed
    its own output in the graph."""
    X, Y = synthetic()
    params = {"monotonic_cst": [1] * (N_FEATURES - 1) + [-1], **FAST.get(kind, {})}
    pipeline = make_aggregator(kind, **params).fit(X[:200], Y[:200])
    path = tmp_path / f"{kind}.onnx"
    export_onnx(pipeline, N_FEATURES, path, X[:60], output_names=["a", "b", "c"])
    expected = pipeline.predict(X.astype(np.float32).astype(np.float64))
    assert np.max(np.abs(OnnxAggregator(path).predict(X) - expected)) <= 1e-5


@pytest.mark.parametrize("kind", ["tree", "forest"])
def test_tree_split_between_float32_neighbours(kind, tmp_path) -> None:
    """A value between a float64 threshold and its float32 rounding goes where sklearn sends it."""
    ulp = np.float32(2.0**-23)
    low, high = np.float32(1.0), np.float32(1.0) + 3 * ulp  # threshold 1 + 1.5 ulp rounds up
    X = np.array([[low], [high]] * 20, dtype=np.float64)
    Y = np.array([[0.0, 1.0], [1.0, 0.0]] * 20)
    params = {"n_estimators": 3, "bootstrap": False} if kind == "forest" else {}
    pipeline = make_aggregator(kind, **params).fit(X, Y)
    between = np.array([[np.float32(1.0) + 2 * ulp]], dtype=np.float64)
    assert pipeline.predict(between).tolist() == [[1.0, 0.0]]  # sklearn: not <= threshold
    path = tmp_path / f"{kind}.onnx"
    export_onnx(pipeline, 1, path, sample=np.vstack([X[:2], between]))
    assert OnnxAggregator(path).predict(between).tolist() == [[1.0, 0.0]]


def test_parity_failure_raises_and_writes_nothing(tmp_path, monkeypatch) -> None:
    X, Y = synthetic()
    pipeline = make_aggregator("linear").fit(X, Y)
    honest = pipeline.predict
    monkeypatch.setattr(pipeline, "predict", lambda rows: honest(rows) + 2e-5)  # a drifted model
    path = tmp_path / "drift.onnx"
    with pytest.raises(HDEvalError, match=r"max abs difference 2e-05 > 1e-05"):
        export_onnx(pipeline, N_FEATURES, path)
    assert list(tmp_path.iterdir()) == []


def test_garbage_file_is_refused_naming_it(tmp_path) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ModelIntegrityError, match=r"garbage.onnx"):
        OnnxAggregator(path)
    path.write_text("not a model at all")
    with pytest.raises(ModelIntegrityError, match=r"garbage.onnx"):
        OnnxAggregator(path)
    with pytest.raises(ModelIntegrityError, match=r"missing.onnx.*does not exist"):
        OnnxAggregator(tmp_path / "missing.onnx")


def test_truncated_file_is_refused(exported, tmp_path) -> None:
    data = exported["tree"].read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelIntegrityError, match=r"truncated.onnx"):
        OnnxAggregator(path)


def _tamper(model: onnx.ModelProto) -> None:
    """Shift the weights: the trees' leaf values, or else the largest initializer (coefficients)."""
    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.name == "target_weights_as_tensor":
                values = numpy_helper.to_array(attribute.t) + 0.5
                attribute.t.CopyFrom(numpy_helper.from_array(values, attribute.t.name))
                return
    tensor = max(model.graph.initializer, key=lambda t: numpy_helper.to_array(t).size)
    values = numpy_helper.to_array(tensor) + 0.5
    tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))


@pytest.mark.parametrize("kind", KINDS)
def test_tampered_weights_fail_the_self_check(kind, exported, tmp_path) -> None:
    model = onnx.load(str(exported[kind]))
    _tamper(model)
    path = tmp_path / f"tampered-{kind}.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelIntegrityError, match=f"tampered-{kind}.onnx.*self-check"):
        OnnxAggregator(path)
    OnnxAggregator(path, verify=False)  # opting out still loads


def test_checksum_is_checked(exported) -> None:
    from hdeval.paths import sha256_file

    path = exported["linear"]
    OnnxAggregator(path, expected_sha256=sha256_file(path))
    with pytest.raises(ModelIntegrityError, match=r"linear.onnx has sha256"):
        OnnxAggregator(path, expected_sha256="0" * 64)


def test_not_an_hdeval_model(tmp_path) -> None:
    from onnx import TensorProto, helper

    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
    )
    path = tmp_path / "other.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    with pytest.raises(ModelIntegrityError, match=r"other.onnx is not an hdeval aggregator"):
        OnnxAggregator(path)


def test_runtime_needs_only_numpy_and_onnxruntime(fitted, exported, tmp_path) -> None:
    """Inference in a process where scikit-learn, skl2onnx, onnx, pandas and scipy cannot load."""
    X, _ = synthetic(n=30, seed=5)
    inputs = tmp_path / "x.npy"
    np.save(inputs, X)
    X32 = X.astype(np.float32).astype(np.float64)
    expected = {k: fitted[k].predict(X32).tolist() for k in KINDS}
    script = textwrap.dedent(
        f"""
        import json, sys
        for name in ("sklearn", "skl2onnx", "onnx", "pandas", "scipy"):
            sys.modules[name] = None  # any import of these now fails
        import numpy as np
        import hdeval.export.onnx_export
        from hdeval.export.onnx_runtime import OnnxAggregator
        X = np.load({str(inputs)!r})
        paths = {json.dumps({k: str(v) for k, v in exported.items()})}
        print(json.dumps({{k: OnnxAggregator(p).predict(X).tolist() for k, p in paths.items()}}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    for kind in KINDS:
        assert np.max(np.abs(np.array(got[kind]) - np.array(expected[kind]))) <= 1e-5


def test_benchmark_script_runs(tmp_path) -> None:
    """The runtime benchmark prints its figures for every kind; nothing about time is asserted."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "runtime.py"), "--quick"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for kind in KINDS:
        assert any(line.startswith(kind) for line in result.stdout.splitlines()), result.stdout
    assert "speed-up" in result.stdout
