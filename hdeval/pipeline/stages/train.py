"""Stage train: the shipped bundle. The same model selection that evaluate cross-fits (signal
families, feature groups x aggregator kind, tuning, single-column fallback), by document-grouped
CV on every row of the run; the CV-best fit on all of them and exported (ONNX aggregator,
criteria tree, card with the CV table, and each score's prediction-interval widths: conformal
quantiles of evaluate's cross-fitted errors). Evaluate's cross-fitted figure estimates this
bundle."""

from __future__ import annotations

import joblib

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.export.bundle import export_evaluator
from hdeval.export.intervals import bundle_intervals
from hdeval.params import Params
from hdeval.pipeline.stages.base import FINAL_LAYER, Out, Stage
from hdeval.pipeline.stages.final_layer import FinalLayer
from hdeval.training.fit import select_and_fit


def run(params: Params) -> None:
    train = load_labels(ws.ROWS, params.data.aspects, params.data.score_range)
    final = FinalLayer.read(params)
    params = final.params_scored(params)
    features = ws.read_features(ws.EVALUATE / "features.csv")
    ws.TUNE.mkdir(parents=True, exist_ok=True)  # persistent: kept Optuna studies stay
    selected = select_and_fit(params, final.tree, features, train, ws.TUNE)
    ws.write_json(
        ws.TUNE / "best_params.json",
        {**selected.summary(), "columns": list(selected.features.columns)},
    )
    joblib.dump(selected.model, ws.AGGREGATOR)
    evaluate = params.evaluate
    intervals = bundle_intervals(ws.EVALUATE / "predictions" / "hdeval.csv", train.targets,
                                 evaluate.interval_level, evaluate.interval_bins,
                                 train.samples.get("system_id"))  # fmt: skip
    export_evaluator(ws.BUNDLE, selected, train, params, final.report["llm_identity"], intervals)
    print(f"{selected.kind} on {selected.feature_set.name} (CV Pearson {selected.cv_pearson:.3f})")
    print(f"evaluator bundle written to {ws.BUNDLE}")


STAGE = Stage(
    "train",
    run,
    deps=(
        "work/prepared/rows.jsonl",
        FINAL_LAYER,
        "work/evaluate/features.csv",
        "work/evaluate/predictions/hdeval.csv",
    ),
    outs=(
        # the Optuna study: a killed run resumes with the missing trials only
        Out("work/tune", persist=True),
        # kept until the new bundle is swapped in (export is atomic)
        Out("models/evaluator", persist=True),
    ),
    params=(
        "data.aspects",
        "data.score_range",
        "aggregator",
        "hierarchy",
        "task",
        "evaluate.interval_level",
        "evaluate.interval_bins",
    ),
)
