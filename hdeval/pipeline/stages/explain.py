"""Stage explain: the shipped bundle on every row of the run, through the production path (its
scores and each score's explanation), SHAP beeswarm and bar charts per aspect, and the
permutation importance of the final layer's criteria."""

from __future__ import annotations

import json

import joblib
import pandas as pd

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.explain.runtime import explain_scores, load_background
from hdeval.explain.shap_report import explain_report
from hdeval.export.evaluator import Evaluator
from hdeval.llm.judge import open_judge
from hdeval.params import Params
from hdeval.pipeline.stages.base import FINAL_LAYER, Out, Stage
from hdeval.pipeline.stages.final_layer import FinalLayer


def run(params: Params) -> None:
    rows = load_labels(ws.ROWS, params.data.aspects, params.data.score_range)
    columns = ws.read_json(ws.TUNE / "best_params.json")["columns"]  # the selected feature set
    evaluator = Evaluator.load(ws.BUNDLE, open_judge(params.llm), params.llm.strict_precision)
    scores = evaluator.score_samples(rows.samples)  # every request cached by evaluate
    out = ws.fresh(ws.EXPLAIN)
    scores.aspects.to_csv(out / "bundle_scores.csv")
    explained_rows = explain_scores(evaluator, scores.criteria, by_criterion=True)
    with open(out / "explanations.jsonl", "w", encoding="utf-8") as handle:
        for sample_id, explained in explained_rows.items():
            handle.write(json.dumps({"id": str(sample_id), "explanation": explained}) + "\n")
    written = explain_report(
        joblib.load(ws.AGGREGATOR),
        ws.read_features(ws.EVALUATE / "features.csv")[columns],
        ws.fresh(ws.PLOTS / "explain"),
        output_names=rows.aspects,
        importances=pd.Series(FinalLayer.read(params).report["importances"]),
        background=load_background(ws.BUNDLE),
        seed=params.hierarchy.seed,
        table=out / "mean_abs_shap.csv",
    )
    print(f"explanations: {', '.join(sorted(p.name for p in written.values()))}")


STAGE = Stage(
    "explain",
    run,
    deps=(
        "work/prepared/rows.jsonl",
        FINAL_LAYER,
        "work/evaluate/features.csv",
        "work/tune",
        "models/evaluator",
    ),
    outs=(Out("plots/explain", cache=False), Out("work/explain")),
    params=("data.aspects", "data.score_range", "hierarchy.layers", "hierarchy.seed", "llm"),
)
