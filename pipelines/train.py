"""Stage train: tune the aggregator with document-grouped CV, fit it on every training row,
export the evaluator bundle (ONNX aggregator, criteria tree, card)."""

import joblib

from hdeval import workspace as ws
from hdeval.criteria import CriteriaTree
from hdeval.data import load_labels
from hdeval.params import load_params
from hdeval.training import export_evaluator, tune_and_fit


def main() -> None:
    params = load_params(ws.PARAMS)
    train = load_labels(ws.PREPARED / "train.jsonl", params.data.aspects, params.data.score_range)
    final = ws.layer_dir(params.hierarchy.layers)
    tree = CriteriaTree.from_yaml(final / "tree.yaml")
    features = ws.read_features(final / "features.csv")
    model, best = tune_and_fit(params, features, train, ws.TUNE)
    ws.write_json(ws.TUNE / "best_params.json", {"kind": params.aggregator.kind, "params": best})
    joblib.dump(model, ws.AGGREGATOR)
    report = ws.read_json(final / "report.json")
    # the modes the judge could score (a server without likelihoods drops that mode)
    hierarchy = params.hierarchy.model_copy(update={"modes": report["modes"]})
    params = params.model_copy(update={"hierarchy": hierarchy})
    identity = report["llm_identity"]
    export_evaluator(ws.BUNDLE, model, tree, features, train, params, identity)
    print(f"evaluator bundle written to {ws.BUNDLE}")


if __name__ == "__main__":
    ws.run_stage("train", main)
