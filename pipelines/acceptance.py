"""Stage acceptance: the exported evaluator's gates. Refused when its DHP D_min^EW is below the
threshold, or when its held-out agreement is below the best same-judge baseline by more than the
margin; `acceptance.on_failure` decides whether a refusal fails `dvc repro` or only warns."""

import pandas as pd

from hdeval import workspace as ws
from hdeval.acceptance import baseline_verdict, dhp_verdict, enforce
from hdeval.params import load_params


def main() -> None:
    settings = load_params(ws.PARAMS).acceptance
    name = "hdeval"  # the exported bundle in the DHP and comparison tables
    dhp = ws.read_json(ws.DHP / "summary.json")["scorers"][name]
    dhp_table = pd.read_csv(ws.DHP / f"{name}.csv", index_col=0)
    verdicts = [
        dhp_verdict(name, dhp["D_min_ew"], dhp_table, settings),
        baseline_verdict(pd.read_csv(ws.BASELINES / "compare.csv"), settings, name),
    ]
    ws.write_json(ws.ACCEPTANCE, {"verdicts": [v.to_dict() for v in verdicts]})
    print("\n".join(enforce(verdicts, settings.on_failure)))


if __name__ == "__main__":
    ws.run_stage("acceptance", main)
