"""Run an exported aggregator with onnxruntime alone (no scikit-learn needed at inference).

An aggregator file written by :func:`hdeval.export.onnx_export.export_onnx` carries, in its
metadata, a
few probe rows with the scikit-learn predictions for them. Loading runs the probe and refuses a
file whose answers on those rows moved (a corrupted or modified file), as well as a file that does
not parse or is not an hdeval aggregator. The probe cannot see a change that leaves its rows'
predictions alone (say, one leaf of one tree); pass ``expected_sha256`` for a byte-exact check.
This module imports only numpy and onnxruntime.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from hdeval.errors import HDEvalError, ModelIntegrityError
from hdeval.paths import sha256_file

INPUT_NAME = "features"
META_PREFIX = "hdeval."


def decode_rows(text: str) -> np.ndarray:
    """A JSON list of rows (null for NaN) as a float32 matrix."""
    rows = json.loads(text)
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=np.float32)


def encode_rows(matrix: np.ndarray) -> str:
    """A matrix as a JSON list of rows, NaN written as null."""
    return json.dumps([[None if np.isnan(v) else float(v) for v in row] for row in matrix])


def _session(path: Path, n_threads: int | None) -> ort.InferenceSession:
    if not path.is_file():
        raise ModelIntegrityError(f"aggregator file {path} does not exist")
    options = ort.SessionOptions()
    if n_threads is not None:
        options.intra_op_num_threads = n_threads
        options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own classes for unreadable models
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelIntegrityError(
            f"aggregator file {path} is not a readable ONNX model: {first_line[:300]}"
        ) from exc


class OnnxAggregator:
    """An exported aggregator: ``predict(X) -> (n_samples, n_outputs)`` float64 array.

    ``expected_sha256``, when given, must match the file. ``verify`` re-runs the probe rows stored
    at export time and raises :class:`~hdeval.errors.ModelIntegrityError` if the predictions
    differ by more than the stored tolerance. ``n_threads`` sets onnxruntime's intra-op threads.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        expected_sha256: str | None = None,
        verify: bool = True,
        n_threads: int | None = None,
    ) -> None:
        self.path = Path(path)
        if expected_sha256 is not None and self.path.is_file():
            actual = sha256_file(self.path)
            if actual != expected_sha256:
                raise ModelIntegrityError(
                    f"aggregator file {self.path} has sha256 {actual}, expected {expected_sha256}"
                )
        self._session = _session(self.path, n_threads)
        self.n_features, self.n_outputs = self._check_signature()
        self.metadata: dict[str, str] = dict(self._session.get_modelmeta().custom_metadata_map)
        self._output_name = self._session.get_outputs()[0].name
        if verify:
            self.verify()

    # ------------------------------------------------------------------ metadata
    def _check_signature(self) -> tuple[int, int | None]:
        inputs, outputs = self._session.get_inputs(), self._session.get_outputs()
        shape = inputs[0].shape if len(inputs) == 1 else None
        if shape is None or inputs[0].name != INPUT_NAME or len(shape) != 2:
            raise ModelIntegrityError(
                f"aggregator file {self.path} is not an hdeval aggregator: expected one input "
                f"{INPUT_NAME!r} of shape [None, n_features]"
            )
        if not isinstance(shape[1], int) or not outputs:
            raise ModelIntegrityError(f"aggregator file {self.path} has no fixed feature count")
        out_shape = outputs[0].shape
        n_outputs = out_shape[1] if len(out_shape) == 2 and isinstance(out_shape[1], int) else None
        return shape[1], n_outputs

    def _names(self, key: str) -> list[str] | None:
        text = self.metadata.get(META_PREFIX + key)
        return None if text is None else list(json.loads(text))

    @property
    def feature_names(self) -> list[str] | None:
        """Feature column names recorded at export, if any."""
        return self._names("feature_names")

    @property
    def output_names(self) -> list[str] | None:
        """Output (aspect) names recorded at export, if any."""
        return self._names("output_names")

    # ------------------------------------------------------------------ inference
    def _as_matrix(self, X) -> np.ndarray:
        names = self.feature_names
        if hasattr(X, "columns") and names is not None:
            missing = [n for n in names if n not in X.columns]
            if missing:
                raise HDEvalError(f"{self.path}: input lacks feature columns {missing[:5]}")
            X = X[names]
        matrix = np.asarray(X, dtype=np.float32)
        if matrix.ndim == 1:
            matrix = matrix.reshape(1, -1)
        if matrix.ndim != 2 or matrix.shape[1] != self.n_features:
            raise HDEvalError(
                f"{self.path}: expected {self.n_features} features per row, got shape "
                f"{tuple(matrix.shape)}"
            )
        return np.ascontiguousarray(matrix)

    def predict(self, X: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
        """Predicted human scores, shape (n_samples, n_outputs); NaN features are imputed."""
        matrix = self._as_matrix(X)
        (result,) = self._session.run([self._output_name], {INPUT_NAME: matrix})
        return np.asarray(result, dtype=np.float64).reshape(len(matrix), -1)

    def verify(self) -> None:
        """Re-run the probe rows stored at export; raise if the answers moved."""
        probe_in = self.metadata.get(META_PREFIX + "probe_inputs")
        probe_out = self.metadata.get(META_PREFIX + "probe_outputs")
        if probe_in is None or probe_out is None:
            raise ModelIntegrityError(
                f"aggregator file {self.path} carries no probe rows (not written by hdeval?)"
            )
        atol = float(self.metadata.get(META_PREFIX + "atol", "1e-5"))
        expected = decode_rows(probe_out).astype(np.float64)
        got = self.predict(decode_rows(probe_in))
        if got.shape != expected.shape:
            raise ModelIntegrityError(
                f"aggregator file {self.path}: probe gives shape {got.shape}, "
                f"expected {expected.shape}"
            )
        diff = float(np.nanmax(np.abs(got - expected))) if got.size else 0.0
        if not np.isfinite(got).all() or diff > atol:
            raise ModelIntegrityError(
                f"aggregator file {self.path} fails its self-check: probe predictions differ "
                f"from the exported model by up to {diff:.3g} (tolerance {atol:g}); "
                "the file is corrupted or was modified"
            )
