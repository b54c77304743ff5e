"""Stage evaluate: every row of the run scored on the final tree's criteria, then cross-fitted
(``evaluate.folds`` outer document folds, the whole model selection nested inside each): the
out-of-fold predictions of the bundle and of its ablations, and their agreement with the human
scores over all rows, with document-bootstrap CIs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from hdeval import workspace as ws
from hdeval.data import LabelledData, load_labels
from hdeval.llm.judge import open_judge
from hdeval.params import Params
from hdeval.pipeline.stages.base import EVERY_LAYER, Out, Stage
from hdeval.pipeline.stages.final_layer import FinalLayer
from hdeval.report.results import agreement_line, evaluation_plots
from hdeval.report.summary import layer_summary, machine, stage_cost
from hdeval.scoring.columns import UNCONDITIONED
from hdeval.scoring.run import ScoringRun
from hdeval.training.crossfit import cross_fit
from hdeval.training.fit import agreements
from hdeval.training.hierarchy import scores_unconditioned

if TYPE_CHECKING:
    from hdeval.pipeline.scenario import Scenario


def run(params: Params) -> None:
    data = params.data
    rows = load_labels(ws.ROWS, data.aspects, data.score_range)
    unseen = load_labels(ws.PREPARED / "test.jsonl", data.aspects, data.score_range)
    final = FinalLayer.read(params)
    params = final.params_scored(params)
    grown_on = ws.read_features(ws.layer_dir(params.hierarchy.layers) / "features.csv")
    scored, judged = _score(params, final, unseen, UNCONDITIONED in grown_on.columns)
    features = pd.concat([grown_on, scored.features]).loc[rows.samples.index]
    fitted = cross_fit(params, final.tree, features, rows)
    out = ws.fresh(ws.EVALUATE)
    features.to_csv(out / "features.csv")
    (out / "predictions").mkdir()
    for name, table in fitted.predictions.items():
        table.to_csv(out / "predictions" / f"{name}.csv")
    layers = [
        ws.read_json(ws.layer_dir(n) / "report.json") for n in range(1, params.hierarchy.layers + 1)
    ]
    figures = agreements(fitted.predictions, rows, params.evaluate.bootstrap, params.hierarchy.seed)
    metrics = {
        "cross_fitted": figures,
        "folds": fitted.folds,
        "layers": {str(r["layer"]): layer_summary(r) for r in layers},
        "llm": {
            "identity": judged["identity"],
            "failed_scores": len(scored.failures),
            "truncated_samples": scored.truncated_samples,
            "stages": {
                **{f"layer@{r['layer']}": stage_cost(r) for r in layers},
                "evaluate": judged["cost"],
            },
        },
        "rows": {
            "all": len(rows),
            "documents": rows.samples["doc_id"].nunique(),
            "tree_rows": len(grown_on),
            "tree_documents": rows.samples.loc[grown_on.index, "doc_id"].nunique(),
        },
        "machine": machine(),
        "left_out": {k: v for r in layers for k, v in r.get("left_out", {}).items()},
    }
    ws.write_json(out / "metrics.json", metrics)
    evaluation_plots(fitted.predictions["hdeval"], rows, layers, ws.fresh(ws.PLOTS / "evaluate"))
    print(
        f"cross-fitted {len(rows)} texts of {metrics['rows']['documents']} documents "
        f"({params.evaluate.folds} folds): {agreement_line(figures['hdeval']['average'])}"
    )


def _score(
    params: Params, final: FinalLayer, unseen: LabelledData, unconditioned: bool
) -> tuple[ScoringRun, dict]:
    """``unseen``'s rows scored on the final tree, and the judge's identity and cost; the
    judge's weights are let go on return, before the cross-fitting's processes start."""
    judge = open_judge(params.llm)
    scored = final.scorer(judge, params, unconditioned).score(unseen.samples, final.tree)
    return scored, {"identity": judge.identity, "cost": judge.cost()}


def plan(scenario: Scenario) -> None:
    """Every feature of the final layer for the rows the layers did not score; explain's bundle
    then reads a subset of these features, all cached."""
    cost = scenario.cost("evaluate")
    final = scenario.final
    if cost.rerun:
        folds = scenario.params.evaluate.folds
        cost.notes.append(f"{folds} model selections here, one in train (no LLM call): not counted")
    if cost.rerun and final is not None:
        unconditioned = scores_unconditioned(scenario.hierarchy)
        scorer = final.scorer(scenario.judge, scenario.params, unconditioned)
        scenario.planner.count(cost, scorer.plan(scenario.test.samples, final.tree))


STAGE = Stage(
    "evaluate",
    run,
    deps=("work/prepared", EVERY_LAYER),
    outs=(Out("work/evaluate"), Out("plots/evaluate", cache=False)),
    params=(
        "data.aspects",
        "data.score_range",
        "task",
        "llm",
        "hierarchy",
        "aggregator",
        "evaluate.folds",
        "evaluate.bootstrap",
    ),
    plan=plan,
)
