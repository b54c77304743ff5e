"""How many labels do I need? The bundle's held-out agreement against the number of training
documents, on a fixed held-out set, from a finished run (no LLM call: every score is read from
the run's outputs).

For each size, ``--draws`` random subsets of the run's training documents are drawn; the
shipped aggregator (its kind, tuned parameters and columns) is refit on each subset's texts and
scores the run's held-out texts. Prints, per size, the mean held-out Pearson r with the spread
over draws and the document-bootstrap CI of the first draw, and writes a PNG chart and that
table as a CSV beside it (docs/results.md shows both).

    python benchmarks/learning_curve.py --run . --out docs/learning_curve.png

The default run trains on 20 SummEval documents; a run of ``data.n_docs: null`` (67 training
documents) gives the whole curve.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hdeval.data import load_labels
from hdeval.metrics import agreement
from hdeval.params import load_params
from hdeval.report.results_page import learning_curve_table
from hdeval.scales import clip_to_ranges
from hdeval.training.aggregators import constraints
from hdeval.training.fit import fit_aggregator


def curve(run: Path, sizes: list[int], draws: int, seed: int) -> pd.DataFrame:
    """Rows of (documents, draw, pearson, ci_low, ci_high) for each size and draw."""
    params = load_params(run / "params.yaml")
    data = params.data
    train = load_labels(run / "work/prepared/train.jsonl", data.aspects, data.score_range)
    test = load_labels(run / "work/prepared/test.jsonl", data.aspects, data.score_range)
    best = json.loads((run / "work/tune/best_params.json").read_text())
    columns = best["columns"]
    final = run / "work/layers" / str(params.hierarchy.layers)
    train_x = pd.read_csv(final / "features.csv", index_col=0)[columns]
    test_x = pd.read_csv(run / "work/evaluate/test_features.csv", index_col=0)[columns]
    train_x.index, test_x.index = train_x.index.astype(str), test_x.index.astype(str)
    fixed = {**best["params"], **constraints(best["kind"], params.aggregator.nonnegative, columns)}
    documents = sorted(set(train.samples["doc_id"]))
    rng = np.random.default_rng(seed)
    rows = []
    for size in [s for s in sizes if s <= len(documents)]:
        for draw in range(draws if size < len(documents) else 1):
            chosen = set(rng.choice(documents, size, replace=False))
            ids = train.samples.index[train.samples["doc_id"].isin(chosen)]
            model = fit_aggregator(
                best["kind"], fixed, train_x.loc[ids], train.targets.loc[ids], params.hierarchy.seed
            )
            predicted = pd.DataFrame(
                clip_to_ranges(model.predict(test_x.to_numpy(float)), test.aspects,
                               data.ranges()),
                index=test_x.index, columns=test.aspects,
            )  # fmt: skip
            figure = agreement(
                predicted, test.targets, test.samples["doc_id"], test.samples["system_id"],
                params.evaluate.bootstrap if draw == 0 else 0, params.hierarchy.seed,
            )["average"]["dataset"]  # fmt: skip
            low, high = figure.get("pearson_ci", (np.nan, np.nan))
            rows.append({"documents": size, "texts": len(ids), "draw": draw,
                         "pearson": figure["pearson"], "ci_low": low, "ci_high": high})  # fmt: skip
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = table.groupby("documents")["pearson"].agg(["mean", "min", "max"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(summary.index, summary["mean"], marker="o", label="mean over draws")
    ax.fill_between(summary.index, summary["min"], summary["max"], alpha=0.2, label="draws")
    ax.set_xlabel("training documents")
    ax.set_ylabel("held-out dataset Pearson r")
    ax.set_title("The bundle's agreement against the labels it learned from")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=Path("."), help="a finished run's directory")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 15, 20, 40, 67])
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="PNG chart to write")
    args = parser.parse_args()
    table = curve(args.run, args.sizes, args.draws, args.seed)
    summary = table.groupby("documents").agg(
        texts=("texts", "first"), mean=("pearson", "mean"), low=("pearson", "min"),
        high=("pearson", "max"), ci_low=("ci_low", "first"), ci_high=("ci_high", "first"),
        draws=("draw", "count"),
    )  # fmt: skip
    print(learning_curve_table(summary.reset_index()))
    if args.out:
        plot(table, args.out)
        summary.round(4).to_csv(args.out.with_suffix(".csv"))
        print(f"chart written to {args.out}, table to {args.out.with_suffix('.csv')}")


if __name__ == "__main__":
    main()
