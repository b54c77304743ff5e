"""Stage report: metrics.json (cross-fitted agreement, ablations, baselines, DHP, model selection,
acceptance verdicts, LLM cost), its headline numbers for `dvc exp show` (headline.json), the
results table results.md and the self-contained page report.html."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hdeval import workspace as ws
from hdeval.params import Params
from hdeval.pipeline.stages.base import EVERY_LAYER, Out, Stage
from hdeval.report.render import write_report
from hdeval.report.results import (
    acceptance_markdown,
    families_markdown,
    layers_markdown,
    left_out_markdown,
    reading_markdown,
    results_markdown,
    run_summary,
    selection_markdown,
)
from hdeval.report.summary import baseline_summary, headline, llm_totals, peer_summary
from hdeval.report.systems import run_checks
from hdeval.report.systems_view import intervals_markdown, systems_markdown


def run(params: Params) -> None:
    evaluation = ws.read_json(ws.EVALUATE / "metrics.json")
    table = pd.read_csv(ws.BASELINES / "compare.csv")
    dhp = ws.read_json(ws.DHP / "summary.json")
    verdicts = ws.read_json(ws.ACCEPTANCE)["verdicts"]
    stages = {
        **evaluation["llm"]["stages"],
        "baselines": ws.read_json(ws.BASELINES / "cost.json"),
        "dhp": dhp["llm"],
    }
    left_out = {
        **evaluation.get("left_out", {}),
        **ws.read_json(ws.BASELINES / "left_out.json"),
        **dhp.get("left_out", {}),
    }
    best = ws.read_json(ws.TUNE / "best_params.json")  # the shipped bundle's selection
    metrics = {
        **evaluation,
        "selection": {k: v for k, v in best.items() if k != "columns"},
        "left_out": left_out,
        "baselines": baseline_summary(table),
        "dhp": dhp["scorers"],
        "acceptance": {
            v["gate"]: {"accepted": v["accepted"], "message": v["message"], **v["figures"]}
            for v in verdicts
        },
        "llm": {**evaluation["llm"], "stages": stages, **llm_totals(stages)},
    }
    if (peer := peer_summary(verdicts)) is not None:
        metrics["peer"] = peer
    evaluate = params.evaluate
    metrics.update(
        run_checks(Path("."), evaluate.interval_level, evaluate.interval_bins,
                   params.data.ranges(), params.hierarchy.seed)
    )  # fmt: skip
    ws.write_json(ws.METRICS, metrics)
    ws.write_json(ws.HEADLINE, headline(metrics))
    text = results_markdown(table, dhp["scorers"], metrics) + left_out_markdown(left_out)
    text += "\n" + acceptance_markdown(verdicts) + "\n" + selection_markdown(metrics["selection"])
    text += "\n" + families_markdown(metrics["selection"])
    text += "\n" + reading_markdown(pd.read_csv(ws.EXPLAIN / "mean_abs_shap.csv", index_col=0))
    text += "\n" + layers_markdown(metrics["layers"])
    text += "\n" + intervals_markdown(metrics.get("intervals"))
    text += "\n" + systems_markdown(metrics.get("systems"))
    ws.RESULTS.write_text(text)
    write_report(Path("."))
    print(run_summary(metrics, str(ws.BUNDLE)))


STAGE = Stage(
    "report",
    run,
    deps=(
        "work/prepared/rows.jsonl",
        EVERY_LAYER,
        "work/evaluate",
        "work/tune/best_params.json",
        "work/baselines",
        "work/dhp",
        "work/acceptance.json",
        "work/explain",
        "plots/explain",
    ),
    outs=(
        Out("metrics.json", cache=False),
        Out("results.md", cache=False),
        Out("report.html", cache=False),
    ),
    metrics=(Out("headline.json", cache=False),),
    params=(
        "data.aspects",
        "data.score_range",
        "hierarchy.seed",
        "evaluate.interval_level",
        "evaluate.interval_bins",
    ),
)
