"""Exports evaluator bundles in a loop; the kill -9 test runs it as a separate process.

Prints ``ready`` once the aggregator is fitted, then ``exported <version>`` after each export.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hdeval.export.bundle import export_bundle
from hdeval.params import TaskSpec
from hdeval.scoring.columns import feature_columns
from hdeval.training.aggregators import make_aggregator
from hdeval.tree.criteria import CriteriaTree, Criterion

IDENTITY = "export-worker-judge"
ASPECTS = ["coherence", "fluency"]
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "well organized"),
        Criterion("fluency", "fluency", "grammatical"),
        Criterion("coherence.order", "order", "logical order", "coherence", 2),
    ]
)
FEATURES = feature_columns([c.id for c in TREE], ["prompt"])


def fitted(seed: int = 0):
    """A forest aggregator on synthetic criterion scores, and its training matrix."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 5, (200, len(FEATURES)))
    Y = np.c_[X[:, 0] + 0.5 * X[:, 2], X[:, 1]] + rng.normal(0, 0.1, (200, 2))
    return make_aggregator("forest", n_estimators=30, random_state=seed).fit(X, Y), X


def export(path: Path, version: int, pipeline, X: np.ndarray) -> Path:
    """One bundle whose card records ``version`` in its metrics."""
    return export_bundle(
        path,
        pipeline,
        TREE,
        FEATURES,
        ASPECTS,
        llm_identity=IDENTITY,
        task=TaskSpec(),
        modes=["prompt"],
        unconditioned=False,
        training_data="synthetic",
        metrics={"version": version},
        sample=X,
        background=X[:32],
    )


def main(path: str, n_exports: int) -> None:
    pipeline, X = fitted()
    print("ready", flush=True)
    for version in range(n_exports):
        export(Path(path), version, pipeline, X)
        print(f"exported {version}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
