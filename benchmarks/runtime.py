"""Aggregator inference speed: ONNX Runtime vs scikit-learn ``predict``, in one process.

For each aggregator kind, fits a pipeline on synthetic criterion scores of a realistic shape
(default: 400 training rows, 40 features, 4 outputs, 5% NaN), exports it to ONNX, and prints:

- single-row latency (median over many calls) of sklearn and of ONNX, and the speed-up;
- batch throughput (rows per second, median over repeats) on a batch of 1000 rows;
- the largest absolute difference between the two predictions.

It only prints figures; it asserts nothing about time. Run: ``python benchmarks/runtime.py``
(``--quick`` for a tiny smoke run).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import sklearn

from hdeval.export.onnx_export import OnnxAggregator, export_onnx
from hdeval.training.aggregators import KINDS, make_aggregator


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=40)
    parser.add_argument("--outputs", type=int, default=4)
    parser.add_argument("--train-rows", type=int, default=400)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--single-calls", type=int, default=300)
    parser.add_argument("--batch-repeats", type=int, default=20)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.features, args.train_rows, args.batch = 8, 60, 50
        args.single_calls, args.batch_repeats = 5, 2
    return args


def synthetic(n: int, n_features: int, n_outputs: int, seed: int = 0):
    """Criterion-like scores in [1, 5] with 5% NaN, and outputs that depend on them."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 5, size=(n, n_features))
    W = rng.normal(scale=0.3, size=(n_features, n_outputs))
    Y = X @ W + np.sin(X[:, :n_outputs]) + rng.normal(scale=0.2, size=(n, n_outputs))
    X[rng.random(X.shape) < 0.05] = np.nan
    return X, Y


def median_seconds(call: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """Median wall time of ``call`` over ``repeats`` runs, after ``warmup`` runs."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_kind(kind: str, args: argparse.Namespace, folder: Path) -> dict[str, float]:
    X, Y = synthetic(args.train_rows + args.batch, args.features, args.outputs)
    X_train, Y_train, X_batch = X[: args.train_rows], Y[: args.train_rows], X[args.train_rows :]
    params = {"n_estimators": 10} if args.quick and kind == "forest" else {}
    pipeline = make_aggregator(kind, random_state=0, **params).fit(X_train, Y_train)
    path = folder / f"{kind}.onnx"
    export_onnx(pipeline, args.features, path, X_train[:100])
    runtime = OnnxAggregator(path, n_threads=args.threads)
    row = X_batch[:1]
    result = {
        "sk_row": median_seconds(lambda: pipeline.predict(row), args.single_calls),
        "ox_row": median_seconds(lambda: runtime.predict(row), args.single_calls),
        "sk_batch": median_seconds(lambda: pipeline.predict(X_batch), args.batch_repeats),
        "ox_batch": median_seconds(lambda: runtime.predict(X_batch), args.batch_repeats),
    }
    reference = pipeline.predict(X_batch.astype(np.float32).astype(np.float64))
    result["max_diff"] = float(np.max(np.abs(runtime.predict(X_batch) - reference)))
    result["size_kb"] = path.stat().st_size / 1024
    return result


def report(kind: str, r: dict[str, float], batch: int) -> str:
    return (
        f"{kind:<7} {r['sk_row'] * 1e6:>10.1f} {r['ox_row'] * 1e6:>10.1f} "
        f"{r['sk_row'] / r['ox_row']:>9.1f}x {batch / r['sk_batch']:>12,.0f} "
        f"{batch / r['ox_batch']:>12,.0f} {r['max_diff']:>9.1e} {r['size_kb']:>9.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(
        f"python {platform.python_version()}, scikit-learn {sklearn.__version__}, "
        f"onnxruntime {onnxruntime.__version__}, {os.cpu_count()} CPUs, "
        f"onnxruntime threads {args.threads}"
    )
    print(
        f"data: {args.train_rows} training rows, {args.features} features, {args.outputs} "
        f"outputs, 5% NaN; batch {args.batch} rows; medians of {args.single_calls} single-row "
        f"calls and {args.batch_repeats} batch calls"
    )
    header = (
        f"{'kind':<7} {'sk 1-row':>10} {'onnx 1-row':>10} {'speed-up':>10} "
        f"{'sk rows/s':>12} {'onnx rows/s':>12} {'max|diff|':>9} {'onnx KiB':>9}"
    )
    print(header + "\n" + f"{'':<7} {'(us)':>10} {'(us)':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            print(report(kind, bench_kind(kind, args, Path(tmp)), args.batch), flush=True)
    print("speed-up = sklearn single-row latency / ONNX single-row latency")
    return 0


if __name__ == "__main__":
    sys.exit(main())
