"""Stage report: metrics.json (cross-fitted agreement, ablations, baselines, DHP, model selection,
acceptance verdicts, LLM cost), its headline numbers for `dvc exp show` (headline.json), the
results table results.md and the self-contained page report.html."""

from pathlib import Path

import pandas as pd

from hdeval import workspace as ws
from hdeval.params import load_params
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


def main() -> None:
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
    params = load_params(ws.PARAMS)
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


if __name__ == "__main__":
    ws.run_stage("report", main)
