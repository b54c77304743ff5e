"""Stage evaluate: score the held-out documents with the exported bundle; agreement with the
human scores of the bundle and of its ablations, with document-bootstrap CIs; the explanation of
each held-out score (what the report shows for the texts it got most wrong)."""

import json

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.explain.runtime import explain_scores
from hdeval.export.evaluator import Evaluator
from hdeval.llm.judge import open_judge
from hdeval.params import load_params
from hdeval.report.results import (
    agreement_line,
    evaluation_plots,
)
from hdeval.report.summary import layer_summary, machine, stage_cost
from hdeval.scoring.columns import UNCONDITIONED, Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.training.fit import ablation_predictions, agreements
from hdeval.tree.criteria import CriteriaTree


def main() -> None:
    params = load_params(ws.PARAMS)
    data = params.data
    train = load_labels(ws.PREPARED / "train.jsonl", data.aspects, data.score_range)
    test = load_labels(ws.PREPARED / "test.jsonl", data.aspects, data.score_range)
    judge = open_judge(params.llm)
    evaluator = Evaluator.load(ws.BUNDLE, judge, params.llm.strict_precision)
    best = ws.read_json(ws.TUNE / "best_params.json")
    seed, hierarchy = params.hierarchy.seed, params.hierarchy
    final = ws.layer_dir(hierarchy.layers)
    tree = CriteriaTree.from_yaml(final / "tree.yaml")
    modes = ws.read_json(final / "report.json")["modes"]  # what the final layer scored
    train_x = ws.read_features(final / "features.csv")
    # the ablations need every feature of the final layer, not only the bundle's; scored first,
    # each text reads its prefixes once, and the bundle's own calls are then all cached
    unconditioned = UNCONDITIONED in train_x.columns
    profile = Profile.of(hierarchy)
    scorer = CriterionScorer(judge, params.task, modes, unconditioned, profile)
    test_x = scorer.score(test.samples, tree)
    scores = evaluator.score_samples(test.samples)
    predictions = ablation_predictions(
        tree,
        train_x,
        train,
        test_x.features.dropna(),
        best["kind"],
        best["params"],
        seed,
        params.data.ranges(),
        params.aggregator.nonnegative,
    )
    predictions["hdeval"] = scores.aspects  # the exported bundle itself, not a refit
    out = ws.fresh(ws.EVALUATE)
    scores.criteria.to_csv(out / "test_features.csv")
    explanations = explain_scores(evaluator, scores.criteria, by_criterion=True)
    with open(out / "explanations.jsonl", "w", encoding="utf-8") as handle:
        for sample_id, explained in explanations.items():
            handle.write(json.dumps({"id": str(sample_id), "explanation": explained}) + "\n")
    (out / "predictions").mkdir()
    for name, table in predictions.items():
        table.to_csv(out / "predictions" / f"{name}.csv")
    layers = [
        ws.read_json(ws.layer_dir(n) / "report.json") for n in range(1, params.hierarchy.layers + 1)
    ]
    held_out = agreements(predictions, test, params.evaluate.bootstrap, seed)
    metrics = {
        "held_out": held_out,
        "selection": {k: v for k, v in best.items() if k != "columns"},
        "layers": {str(r["layer"]): layer_summary(r) for r in layers},
        "llm": {
            "identity": judge.identity,
            "failed_scores": len(scores.failures),
            "truncated_samples": len({t.sample_id for t in scores.truncations}),
            "stages": {
                **{f"layer@{r['layer']}": stage_cost(r) for r in layers},
                "evaluate": judge.cost(),
            },
        },
        "rows": {"train": len(train), "test": len(test)},
        "machine": machine(),
        "left_out": {k: v for r in layers for k, v in r.get("left_out", {}).items()},
    }
    ws.write_json(out / "metrics.json", metrics)
    evaluation_plots(scores.aspects, test, layers, ws.fresh(ws.PLOTS / "evaluate"))
    print(f"held-out {len(test)} texts: {agreement_line(held_out['hdeval']['average'])}")


if __name__ == "__main__":
    ws.run_stage("evaluate", main)
