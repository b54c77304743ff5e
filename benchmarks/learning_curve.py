"""How many labels do I need? The bundle's cross-fitted r against the number of training
documents, from a finished run (no LLM call: every feature is read from the run's
``work/evaluate/features.csv``).

Every row is cross-fitted over ``evaluate``'s own outer document folds, as ``evaluate`` does,
except that each fold's nested model selection (families, feature set, kind, Optuna tuning,
fallbacks: ``select_and_fit``) and fit see only ``size`` documents drawn among the fold's
training documents; the fold's held-out rows are predicted as usual
(:func:`hdeval.training.learning_curve.learning_curve`). Every draw re-runs the nested
selection in every fold, so a size costs ``--draws`` x ``evaluate.folds`` selections; the time
each size took is printed. A size above a fold's training documents is skipped, and the size of
every fold's whole training set (64 of 80 documents in 5 folds) is drawn once: ``evaluate``'s
own figure. Prints, per size, the mean aspect-averaged r with its range over draws and the
document-bootstrap CI of the first draw; ``--out`` writes a PNG chart and that table as a CSV
beside it (docs/results.md shows both).

    python benchmarks/learning_curve.py --run . --out docs/learning_curve.png
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.params import load_params
from hdeval.pipeline.stages.final_layer import FinalLayer
from hdeval.report.results_page import learning_curve_table
from hdeval.training.learning_curve import learning_curve, summarise


def plot(table: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = table.groupby("documents")["pearson"].agg(["mean", "min", "max"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(summary.index, summary["mean"], marker="o", label="mean over draws")
    ax.fill_between(summary.index, summary["min"], summary["max"], alpha=0.2, label="draws")
    ax.set_xlabel("training documents per fold")
    ax.set_ylabel("cross-fitted dataset Pearson r")
    ax.set_title("The bundle's agreement against the labels it learned from")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=Path("."), help="a finished run's directory")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20, 40, 64])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="of the documents drawn")
    parser.add_argument("--out", type=Path, help="PNG chart to write")
    args = parser.parse_args()
    params = load_params(args.run / "params.yaml")
    rows = load_labels(args.run / ws.ROWS, params.data.aspects, params.data.score_range)
    final = FinalLayer.read(params, args.run)
    params = final.params_scored(params)
    features = ws.read_features(args.run / ws.EVALUATE / "features.csv").loc[rows.samples.index]
    tables = []
    for size in args.sizes:
        start = time.perf_counter()
        table = learning_curve(params, final.tree, features, rows, [size], args.draws, args.seed)
        took = f"{len(table)} draw{'s' * (len(table) != 1)} in {time.perf_counter() - start:.0f} s"
        print(f"{size} documents: {took if len(table) else 'skipped (more than a fold holds)'}")
        tables.append(table)
    table = pd.concat(tables)
    summary = summarise(table, params.evaluate.folds)
    print(learning_curve_table(summary))
    if args.out:
        plot(table, args.out)
        summary.round(4).to_csv(args.out.with_suffix(".csv"), index=False)
        print(f"chart written to {args.out}, table to {args.out.with_suffix('.csv')}")


if __name__ == "__main__":
    main()
