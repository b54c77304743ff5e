"""Stage evaluate: every row of the run scored on the final tree's criteria, then cross-fitted
(``evaluate.folds`` outer document folds, the whole model selection nested inside each): the
out-of-fold predictions of the bundle and of its ablations, and their agreement with the human
scores over all rows, with document-bootstrap CIs."""

import pandas as pd

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.llm.judge import open_judge
from hdeval.params import load_params
from hdeval.report.results import agreement_line, evaluation_plots
from hdeval.report.summary import layer_summary, machine, stage_cost
from hdeval.scoring.columns import UNCONDITIONED, Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.training.crossfit import cross_fit
from hdeval.training.fit import agreements
from hdeval.tree.criteria import CriteriaTree


def main() -> None:
    params = load_params(ws.PARAMS)
    data = params.data
    rows = load_labels(ws.ROWS, data.aspects, data.score_range)
    unseen = load_labels(ws.PREPARED / "test.jsonl", data.aspects, data.score_range)
    final = ws.layer_dir(params.hierarchy.layers)
    tree = CriteriaTree.from_yaml(final / "tree.yaml")
    report = ws.read_json(final / "report.json")
    # the modes the final layer scored (a server without likelihoods, or mode pruning, drops some)
    params = params.model_copy(
        update={"hierarchy": params.hierarchy.model_copy(update={"modes": report["modes"]})}
    )
    grown_on = ws.read_features(final / "features.csv")
    judge = open_judge(params.llm)
    scorer = CriterionScorer(
        judge, params.task, report["modes"], UNCONDITIONED in grown_on.columns,
        Profile.of(params.hierarchy),
    )  # fmt: skip
    scored = scorer.score(unseen.samples, tree)
    features = pd.concat([grown_on, scored.features]).loc[rows.samples.index]
    fitted = cross_fit(params, tree, features, rows)
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
            "identity": judge.identity,
            "failed_scores": len(scored.failures),
            "truncated_samples": scored.truncated_samples,
            "stages": {
                **{f"layer@{r['layer']}": stage_cost(r) for r in layers},
                "evaluate": judge.cost(),
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


if __name__ == "__main__":
    ws.run_stage("evaluate", main)
