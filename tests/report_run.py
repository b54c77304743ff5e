"""A small synthetic run directory with every output the report reads, in the pipeline's
formats, for unit tests of the report (the real pipeline's report is tested in
tests/test_pipeline.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ASPECTS = ["coherence", "fluency"]


def _figure(value: float) -> dict:
    ci = [value - 0.1, value + 0.1]
    return {"pearson": value, "spearman": value, "kendall": value, "pearson_ci": ci}


def _agreement(value: float) -> dict:
    levels = ("dataset", "summary", "system")
    return {a: {lv: _figure(value) for lv in levels} for a in [*ASPECTS, "average"]}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _png(path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 1.5))
    figure.subplots().bar(["a", "b"], [1, 2])
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")


def _node(id_: str, name: str, definition: str, parent: str | None = None) -> dict:
    layer = id_.count(".") + 1
    return {"id": id_, "name": name, "definition": definition, "parent": parent, "layer": layer}


def _layers(root: Path) -> list[dict]:
    """Three layers: both aspects decomposed, one layer-2 criterion decomposed again (the
    other pruned), the last layer's leaves."""
    nodes = [
        _node("coherence", "Coherence", "well structured"),
        _node("fluency", "Fluency", "well written"),
        _node("coherence.order", "Order", "ordered", "coherence"),
        _node("coherence.flow", "Flow", "flows", "coherence"),
        _node("fluency.grammar", "Grammar", "grammatical", "fluency"),
        _node("coherence.order.time", "Time order", "in time", "coherence.order"),
    ]
    reports = [
        {"layer": 1, "criteria": ["coherence", "fluency"], "selected": ["coherence"],
         "modes_next": ["likelihood"],
         "importances": {"coherence": 0.2, "fluency": 0.1, "_text": 0.3}},
        {"layer": 2, "criteria": ["coherence.order", "coherence.flow", "fluency.grammar"],
         "selected": ["coherence.order"], "modes_next": ["likelihood"], "not_decomposed": [],
         "importances": {"coherence.order": 0.09, "coherence.flow": 0.01, "fluency.grammar": 0.02}},
        {"layer": 3, "criteria": ["coherence.order.time"], "selected": [], "modes_next": [],
         "not_decomposed": [], "importances": {"coherence.order.time": 0.04}},
    ]  # fmt: skip
    for report in reports:
        number = report["layer"]
        tree = [n for n in nodes if n["layer"] <= number]
        report.update(n_features=4 * number, cv_pearson=0.3 + 0.01 * number, modes=["likelihood"])
        report.update(mode_gains={}, stopped=None, llm_calls=5, cache_hits=1, seconds=12.0)
        report.update(tokens={"prompt": 100, "completion": 0, "reused": 50})
        _write(root / f"work/layers/{number}/report.json", json.dumps(report))
        _write(root / f"work/layers/{number}/tree.yaml", yaml.safe_dump({"criteria": tree}))
    return reports


def synthetic_run(
    root: Path,
    *,
    peer: bool = True,
    dhp: bool = True,
    dhp_baselines: bool = True,
    baselines: bool = True,
    refused: bool = False,
    report_stage: bool = True,
) -> Path:
    """Write a run into ``root``: 12 cross-fitted texts of 4 documents, 2 aspects, 3 layers.
    ``report_stage`` False: a run that stopped after explain (no metrics.json)."""
    rng = np.random.default_rng(0)
    ids = [f"doc{d}#M{s}" for d in range(4) for s in range(3)]
    human = pd.DataFrame(rng.uniform(1, 5, (len(ids), 2)), index=ids, columns=ASPECTS)
    predicted = human + rng.normal(0, 0.3, human.shape)
    predicted.iloc[7] = human.iloc[7] + 2.5  # the worst text by far
    rows = [
        {"id": i, "doc_id": i.split("#")[0], "system_id": i.split("#")[1],
         "source": f"source of {i}", "output": f"summary text of {i}",
         "scores": human.loc[i].to_dict()}
        for i in ids
    ]  # fmt: skip
    _write(root / "work/prepared/rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    _write(root / "work/evaluate/predictions/hdeval.csv", predicted.rename_axis("id").to_csv())
    explained = {
        i: {"method": "exact", "reference": "background (32 rows)", "aspects": {
            a: {"base": 3.0, "prediction": float(predicted.at[i, a]),
                "contributions": {"coherence.order": float(predicted.at[i, a]) - 3.2,
                                  "fluency without the source": 0.2}}
            for a in ASPECTS}}
        for i in ids
    }  # fmt: skip
    _write(
        root / "work/explain/explanations.jsonl",
        "".join(json.dumps({"id": i, "explanation": e}) + "\n" for i, e in explained.items()),
    )
    layers = _layers(root)
    shap = pd.DataFrame(
        {"meaning": ["likelihood under coherence: mean", "length in words"],
         "coherence": [0.2, 0.05], "fluency": [0.1, 0.0]},
        index=["lik:coherence", "len.words:_text"],
    )  # fmt: skip
    _write(root / "work/explain/mean_abs_shap.csv", shap.to_csv())
    for aspect in ASPECTS:
        for kind in ("bar", "beeswarm"):
            _png(root / f"plots/explain/shap_{kind}_{aspect}.png")
    cv_table = [
        {"features": f"likelihood L{k}", "modes": "likelihood", "layers": k, "unconditioned": True,
         "kind": kind, "n_features": 4 * k, "cv_pearson": 0.4 - 0.01 * k - (kind == "mlp") / 50,
         "rising_share": 0.0}
        for k in (1, 2, 3) for kind in ("linear", "mlp")
    ]  # fmt: skip
    evaluation = {
        "cross_fitted": {"hdeval": _agreement(0.45), "means_only": _agreement(0.39)},
        "selection": {"kind": "linear", "features": "likelihood L1", "cv_pearson": 0.39,
                      "cv_table": cv_table, "max_rising_share": 0.0},
        "layers": {str(r["layer"]): {"cv_pearson": r["cv_pearson"]} for r in layers},
        "llm": {"identity": "transformers:hf:test:float32", "failed_scores": 0,
                "truncated_samples": 0,
                "stages": {"layer@1": {"llm_calls": 5, "cache_hits": 1, "seconds": 12.0,
                                       "tokens": {"prompt": 100, "completion": 0, "reused": 50}},
                           "evaluate": {"llm_calls": 7, "cache_hits": 2, "seconds": 130.0,
                                        "tokens": {"prompt": 300, "completion": 0, "reused": 9}}}},
        "rows": {"all": len(ids), "documents": 4, "tree_rows": 8, "tree_documents": 3},
        "machine": {"cpu": "Test CPU (family 6 model 1; avx2; 2 cores)"},
        "left_out": {},
    }  # fmt: skip
    _write(root / "work/evaluate/metrics.json", json.dumps(evaluation))
    if not report_stage:
        return root
    metrics = dict(evaluation)
    scorers = {"hdeval": 0.45, "likelihood:unconditioned": 0.39, "rouge:rouge1": 0.25}
    if peer:
        scorers["unieval"] = 0.41
        difference = {"difference": 0.04, "ci_low": -0.02, "ci_high": 0.1, "n": len(ids)}
        metrics["peer"] = {
            "name": "unieval", "value": 0.41, "low": 0.33, "high": 0.49, "paired": difference
        }  # fmt: skip
    if baselines:
        table = [
            {"scorer": s, "aspect": a, "level": lv, "correlation": c, "value": v,
             "ci_low": v - 0.08, "ci_high": v + 0.08, "n": len(ids)}
            for s, v in scorers.items() for a in [*ASPECTS, "average"]
            for lv in ("dataset", "summary") for c in ("pearson", "spearman", "kendall")
        ]  # fmt: skip
        _write(root / "work/baselines/compare.csv", pd.DataFrame(table).to_csv(index=False))
        metrics["baselines"] = {s: {"dataset": {"pearson": v}} for s, v in scorers.items()}
    if dhp:
        names = ["hdeval", "likelihood"] if dhp_baselines else ["hdeval"]
        perturbations = ["deletion_minor", "typo_minor", "reorder_minor", "instruction_injection"]
        table = pd.DataFrame(
            {"probe": [False, False, False, True], "p:coherence": [1e-6, 0.2, 0.3, 0.9],
             "p:fluency": [1e-6, 1e-6, 0.01, 0.9], "D_ew": [4.6, 2.1, 0.8, 0.1],
             "D_reward_ew": [np.nan, np.nan, np.nan, 0.0]},
            index=pd.Index(perturbations, name="perturbation"),
        )  # fmt: skip
        for name in names:
            _write(root / f"work/dhp/{name}.csv", table.to_csv())
        metrics["dhp"] = {
            n: {"D_avg_ew": 3.3, "D_min_ew": 0.8, "n_texts": 20, "failed": ["reorder_minor"]}
            for n in names
        }
    gates = {
        "dhp": {"accepted": not refused, "threshold": 1.0,
                "message": "DHP refused hdeval: D_min^EW 0.800 < threshold 1.0; not discerned: "
                "reorder_minor" if refused else "DHP accepted hdeval: D_min^EW 1.2 >= 1.0"},
        "baselines": {"accepted": True, "level": "dataset", "correlation": "pearson",
                      "message": "baselines accepted hdeval: cross-fitted dataset pearson 0.450",
                      "hdeval": {"value": 0.45, "low": 0.37, "high": 0.53},
                      "likelihood:unconditioned": {"value": 0.39, "low": 0.31, "high": 0.47},
                      "best": "likelihood:unconditioned", "margin": 0.02,
                      "paired": [{"against": "likelihood:unconditioned", "difference": 0.06,
                                  "ci_low": 0.02, "ci_high": 0.11, "n": 12}]},
    }  # fmt: skip
    if baselines and dhp:  # the acceptance stage reads both
        metrics["acceptance"] = gates
    _write(root / "metrics.json", json.dumps(metrics))
    return root
