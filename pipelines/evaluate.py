"""Stage evaluate: score the held-out documents with the exported bundle; agreement with the
human scores of the bundle and of its ablations, with document-bootstrap CIs."""

import json

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.evaluator import Evaluator
from hdeval.judge import open_judge
from hdeval.params import load_params
from hdeval.results import evaluation_plots, stage_cost
from hdeval.training import ablation_predictions, agreements


def main() -> None:
    params = load_params(ws.PARAMS)
    data = params.data
    train = load_labels(ws.PREPARED / "train.jsonl", data.aspects, data.score_range)
    test = load_labels(ws.PREPARED / "test.jsonl", data.aspects, data.score_range)
    judge = open_judge(params.llm)
    evaluator = Evaluator.load(ws.BUNDLE, judge)
    scores = evaluator.score_samples(test.samples)
    best = ws.read_json(ws.TUNE / "best_params.json")
    seed = params.hierarchy.seed
    train_x = ws.read_features(ws.layer_dir(params.hierarchy.layers) / "features.csv")
    predictions = ablation_predictions(
        evaluator.tree,
        train_x,
        train,
        scores.criteria.dropna(),
        best["kind"],
        best["params"],
        seed,
        data.ranges(),
    )
    predictions["hdeval"] = scores.aspects  # the exported bundle itself, not a refit
    out = ws.fresh(ws.EVALUATE)
    scores.criteria.to_csv(out / "test_features.csv")
    (out / "predictions").mkdir()
    for name, table in predictions.items():
        table.to_csv(out / "predictions" / f"{name}.csv")
    layers = [
        ws.read_json(ws.layer_dir(n) / "report.json") for n in range(1, params.hierarchy.layers + 1)
    ]
    held_out = agreements(predictions, test, params.evaluate.bootstrap, seed)
    metrics = {
        "held_out": held_out,
        "layers": {
            str(r["layer"]): {"cv_pearson": r["cv_pearson"], "n_features": r["n_features"]}
            for r in layers
        },
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
    }
    ws.write_json(out / "metrics.json", metrics)
    evaluation_plots(scores.aspects, test, layers, ws.fresh(ws.PLOTS / "evaluate"))
    average = held_out["hdeval"]["average"]
    print(json.dumps({level: average[level] for level in ("dataset", "summary")}, indent=2))


if __name__ == "__main__":
    ws.run_stage("evaluate", main)
