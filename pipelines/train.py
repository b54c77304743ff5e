"""Stage train: the shipped bundle. The same model selection that evaluate cross-fits (signal
families, feature groups x aggregator kind, tuning, single-column fallback), by document-grouped
CV on every row of the run; the CV-best fit on all of them and exported (ONNX aggregator,
criteria tree, card with the CV table, and each score's prediction-interval widths: conformal
quantiles of evaluate's cross-fitted errors). Evaluate's cross-fitted figure estimates this
bundle."""

import joblib

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.export.bundle import export_evaluator
from hdeval.export.intervals import bundle_intervals
from hdeval.params import load_params
from hdeval.training.fit import select_and_fit
from hdeval.tree.criteria import CriteriaTree


def main() -> None:
    params = load_params(ws.PARAMS)
    train = load_labels(ws.ROWS, params.data.aspects, params.data.score_range)
    final = ws.layer_dir(params.hierarchy.layers)
    tree = CriteriaTree.from_yaml(final / "tree.yaml")
    features = ws.read_features(ws.EVALUATE / "features.csv")
    report = ws.read_json(final / "report.json")
    # the modes the final layer scored (a server without likelihoods, or mode pruning, drops some)
    hierarchy = params.hierarchy.model_copy(update={"modes": report["modes"]})
    params = params.model_copy(update={"hierarchy": hierarchy})
    ws.TUNE.mkdir(parents=True, exist_ok=True)  # persistent: kept Optuna studies stay
    selected = select_and_fit(params, tree, features, train, ws.TUNE)
    ws.write_json(
        ws.TUNE / "best_params.json",
        {**selected.summary(), "columns": list(selected.features.columns)},
    )
    joblib.dump(selected.model, ws.AGGREGATOR)
    evaluate = params.evaluate
    intervals = bundle_intervals(ws.EVALUATE / "predictions" / "hdeval.csv", train.targets,
                                 evaluate.interval_level, evaluate.interval_bins)  # fmt: skip
    export_evaluator(ws.BUNDLE, selected, train, params, report["llm_identity"], intervals)
    print(f"{selected.kind} on {selected.feature_set.name} (CV Pearson {selected.cv_pearson:.3f})")
    print(f"evaluator bundle written to {ws.BUNDLE}")


if __name__ == "__main__":
    ws.run_stage("train", main)
