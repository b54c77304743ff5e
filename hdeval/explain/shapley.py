"""Interventional Shapley values of any prediction function at one row, against background
rows: exact over all coalitions for a few features, sampled feature orders (antithetic pairs)
above that; either way base + values = prediction. numpy only."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hdeval.errors import HDEvalError

#: Up to this many features, Shapley values are exact (2**d coalitions).
MAX_EXACT_FEATURES = 10
#: Feature orders sampled (in antithetic pairs) above MAX_EXACT_FEATURES.
N_PERMUTATIONS = 64
#: Most rows handed to the model in one predict call.
_BATCH_ROWS = 65536

Predict = Callable[[np.ndarray], np.ndarray]


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
