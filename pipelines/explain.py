"""Stage explain: SHAP beeswarm and bar charts per aspect, and the permutation importance of
the final layer's criteria."""

import joblib
import pandas as pd

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.explain.runtime import load_background
from hdeval.explain.shap_report import explain_report
from hdeval.params import load_params


def main() -> None:
    params = load_params(ws.PARAMS)
    train = load_labels(ws.PREPARED / "train.jsonl", params.data.aspects, params.data.score_range)
    final = ws.layer_dir(params.hierarchy.layers)
    columns = ws.read_json(ws.TUNE / "best_params.json")["columns"]  # the selected feature set
    written = explain_report(
        joblib.load(ws.AGGREGATOR),
        ws.read_features(final / "features.csv")[columns],
        ws.fresh(ws.PLOTS / "explain"),
        output_names=train.aspects,
        importances=pd.Series(ws.read_json(final / "report.json")["importances"]),
        background=load_background(ws.BUNDLE),
        seed=params.hierarchy.seed,
        table=ws.fresh(ws.EXPLAIN) / "mean_abs_shap.csv",
    )
    print(f"explanations: {', '.join(sorted(p.name for p in written.values()))}")


if __name__ == "__main__":
    ws.run_stage("explain", main)
