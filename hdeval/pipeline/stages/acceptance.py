"""Stage acceptance: the exported evaluator's gates. Refused when its DHP D_min^EW is below the
threshold, or when its cross-fitted agreement is below the best same-judge baseline by more than the
margin; `acceptance.on_failure` decides whether a refusal fails `dvc repro` or only warns."""

from __future__ import annotations

import pandas as pd

from hdeval import workspace as ws
from hdeval.acceptance import (
    baseline_verdict,
    compared_with,
    dhp_verdict,
    enforce,
    paired_differences,
)
from hdeval.data import load_labels
from hdeval.params import Params
from hdeval.pipeline.stages.base import Out, Stage


def run(params: Params) -> None:
    settings = params.acceptance
    name = "hdeval"  # the exported bundle in the DHP and comparison tables
    dhp = ws.read_json(ws.DHP / "summary.json")["scorers"][name]
    dhp_table = pd.read_csv(ws.DHP / f"{name}.csv", index_col=0)
    table = pd.read_csv(ws.BASELINES / "compare.csv")
    test = load_labels(ws.ROWS, params.data.aspects, params.data.score_range)
    peer = params.evaluate.peer.name if params.evaluate.peer else None  # stated, not gated
    differences = paired_differences(
        ws.read_features(ws.BASELINES / "predictions.csv"),
        test.samples,
        test.targets,
        name,
        compared_with(table, settings, peer),
        settings,
        params.evaluate.bootstrap,
        params.hierarchy.seed,
    )
    verdicts = [
        dhp_verdict(name, dhp["D_min_ew"], dhp_table, settings),
        baseline_verdict(table, settings, name, differences, peer),
    ]
    ws.write_json(ws.ACCEPTANCE, {"verdicts": [v.to_dict() for v in verdicts]})
    print("\n".join(enforce(verdicts, settings.on_failure)))


STAGE = Stage(
    "acceptance",
    run,
    deps=(
        "work/prepared/rows.jsonl",
        "work/baselines/compare.csv",
        "work/baselines/predictions.csv",
        "work/dhp/summary.json",
        "work/dhp/hdeval.csv",
    ),
    outs=(Out(str(ws.ACCEPTANCE), cache=False),),
    params=("data.aspects", "data.score_range", "evaluate", "hierarchy.seed", "acceptance"),
)
