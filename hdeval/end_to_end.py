"""``hdeval train``: the pipeline's steps in one process, for users who do not use DVC.

The same library functions as the ``prepare``, ``layer``, ``train`` and ``evaluate`` stages, in
the same order: split, Algorithm 1, tuning, export, and the exported bundle scored on the
held-out documents.
"""

from __future__ import annotations

from pathlib import Path

from hdeval.criteria import aspects_tree
from hdeval.data.splitting import load_split
from hdeval.evaluator import Evaluator
from hdeval.hierarchy import train_hierarchy
from hdeval.judge import CachedJudge
from hdeval.params import Params
from hdeval.training import ablation_predictions, agreements, export_evaluator, tune_and_fit


def train_evaluator(
    params: Params, judge: CachedJudge, out_dir: Path, work_dir: Path, progress: bool = True
) -> dict:
    """Algorithm 1, tuning, export, then the exported bundle scored on the held-out documents.

    The same steps as the pipeline's ``layer``, ``train`` and ``evaluate`` stages; returns the
    metrics (the held-out agreement of the bundle and of every ablation).
    """
    train, test = load_split(params.data)
    layers = train_hierarchy(
        aspects_tree(params.data), train, judge, params.task, params.hierarchy, progress
    )
    final = layers[-1]
    train_x = final.run.features
    model, best = tune_and_fit(params, train_x, train, work_dir)
    export_evaluator(out_dir, model, final.tree, train_x, train, params, judge.identity)
    scores = Evaluator.load(out_dir, judge).score_samples(test.samples, progress=progress)
    kind, seed = params.aggregator.kind, params.hierarchy.seed
    predictions = ablation_predictions(
        final.tree, train_x, train, scores.criteria.dropna(), kind, best, seed, params.data.ranges()
    )
    predictions["hdeval"] = scores.aspects
    return {
        "layers": [layer.report.to_dict() for layer in layers],
        "aggregator": {"kind": kind, "params": {k: str(v) for k, v in best.items()}},
        "held_out": agreements(predictions, test, params.evaluate.bootstrap, seed),
        "rows": {"train": len(train), "test": len(test)},
        "llm": {"identity": judge.identity, **judge.cost()},
    }
