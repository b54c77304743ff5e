"""What a run's summary holds: the aspect-averaged figures of every scorer, the LLM cost per
stage and in total, the machine, the published peer, and the headline numbers ``dvc exp show``
compares (``headline.json``)."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd


def baseline_summary(table: pd.DataFrame) -> dict:
    """``{scorer: {level: {correlation: value, correlation_ci: [low, high]}}}`` of the aspect
    average of a compare table (no ``_ci`` where no bootstrap was drawn)."""
    average = table[table["aspect"] == "average"]
    out: dict = {}
    for row in average.itertuples(index=False):
        value = None if math.isnan(row.value) else float(row.value)
        entry = out.setdefault(row.scorer, {}).setdefault(row.level, {})
        entry[row.correlation] = value
        if not (math.isnan(row.ci_low) or math.isnan(row.ci_high)):
            entry[f"{row.correlation}_ci"] = [float(row.ci_low), float(row.ci_high)]
    return out


def llm_totals(stages: Mapping[str, Mapping]) -> dict:
    """LLM calls, cache hits and model tokens summed over the stages, and the overall hit rate."""
    calls = sum(int(s["llm_calls"]) for s in stages.values())
    hits = sum(int(s["cache_hits"]) for s in stages.values())
    seconds = sum(float(s.get("seconds", 0.0)) for s in stages.values())
    tokens: Counter[str] = Counter()
    for stage in stages.values():
        tokens.update(stage["tokens"])
    return {
        "llm_calls": calls,
        "cache_hits": hits,
        "cache_hit_rate": hits / (calls + hits) if calls + hits else 1.0,
        "tokens": dict(tokens),
        "seconds": round(seconds, 1),
    }


def peer_summary(verdicts: list[Mapping]) -> dict | None:
    """The published peer's figure and the bundle's paired difference from it, as the
    baseline gate stated them (None without a peer)."""
    figures = next((v["figures"] for v in verdicts if v["gate"] == "baselines"), {})
    name = figures.get("peer")
    if name is None:
        return None
    paired = next((p for p in figures.get("paired", []) if p["against"] == name), None)
    return {"name": name, **figures[name], "paired": paired}


def machine() -> dict:
    """The CPU this process runs on, as ``lscpu`` names it (model name, family, model) and the
    instruction sets the judge's speed depends on."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        return {"cpu": "an unknown CPU"}
    flags = set(info.get("flags", "").split())
    sets = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags]
    name = info.get("model name", "unknown")
    return {
        "cpu": f"{name} (family {info.get('cpu family')} model {info.get('model')}; "
        f"{', '.join(sets) or 'no AVX2'}; {os.cpu_count()} cores)",
    }


def agreement_of(metrics: Mapping) -> Mapping:
    """Each scorer's agreement with the human scores: cross-fitted over every row, or in a
    record made before cross-fitting, on its held-out documents only."""
    return metrics["cross_fitted"] if "cross_fitted" in metrics else metrics["held_out"]


def evaluated_on(metrics: Mapping) -> str:
    """How the record's figures were read: "cross-fitted" or "held-out"."""
    return "cross-fitted" if "cross_fitted" in metrics else "held-out"


def headline(metrics: Mapping) -> dict:
    """The few numbers ``dvc exp show`` compares across runs (``headline.json``): cross-fitted r
    of the bundle over every row with its CI and at summary level, its paired gain over the best
    same-judge baseline, DHP D_min^EW, the gates (1 accepted, 0 refused), the intervals'
    coverage and the system ranking's Kendall tau (means over the aspects, where the run has
    them), rows, LLM calls and minutes."""
    average = agreement_of(metrics)["hdeval"]["average"]
    dataset, summary = average["dataset"], average["summary"]
    gates = metrics.get("acceptance", {})
    baselines = gates.get("baselines", {})
    paired = [p for p in baselines.get("paired", []) if p["against"] == baselines.get("best")]
    dhp = metrics.get("dhp", {}).get("hdeval", {})
    llm = metrics["llm"]

    def rounded(value: float | None) -> float | None:
        return None if value is None or value != value else round(float(value), 4)

    low, high = dataset.get("pearson_ci") or (None, None)  # none where r is undefined
    out: dict = {
        "r": rounded(dataset["pearson"]),
        "r_low": rounded(low),
        "r_high": rounded(high),
        "summary_r": rounded(summary["pearson"]),
    }
    if paired:
        out.update(
            gain=rounded(paired[0]["difference"]),
            gain_low=rounded(paired[0]["ci_low"]),
            gain_high=rounded(paired[0]["ci_high"]),
        )
    peer = metrics.get("peer")
    if peer is not None:
        out["peer_r"] = rounded(peer["value"])
        if peer.get("paired"):
            out.update(
                vs_peer=rounded(peer["paired"]["difference"]),
                vs_peer_low=rounded(peer["paired"]["ci_low"]),
                vs_peer_high=rounded(peer["paired"]["ci_high"]),
            )
    if dhp:
        out["dhp_min_ew"] = rounded(dhp.get("D_min_ew"))
    out.update({f"{gate}_ok": int(v["accepted"]) for gate, v in gates.items()})
    if covered := metrics.get("intervals", {}).get("aspects"):
        out["coverage"] = rounded(np.mean([a["coverage"] for a in covered.values()]))
    if systems := metrics.get("systems"):
        out["system_tau"] = rounded(np.nanmean([a["kendall_tau"] for a in systems.values()]))
    out.update(
        rows=metrics["rows"]["all"],
        documents=metrics["rows"]["documents"],
        llm_calls=llm["llm_calls"],
        minutes=round(llm["seconds"] / 60, 1) if llm.get("seconds") else None,
    )
    return out


def layer_summary(report: Mapping) -> dict:
    """What a layer's report says about the tree's growth: proxy CV Pearson, features, the modes
    scored, what each mode added to the CV (``hierarchy.min_mode_gain``) and why it stopped."""
    keys = ("cv_pearson", "n_features", "modes", "mode_gains", "modes_next", "stopped")
    return {k: report.get(k) for k in keys}


def stage_cost(report: Mapping) -> dict:
    """The LLM cost figures of a stage's report, and its time where the report has it."""
    keys = ("llm_calls", "cache_hits", "cache_hit_rate", "tokens", "seconds")
    return {k: report[k] for k in keys if k in report}


def standing(paired: Mapping | None) -> str:
    """ "ahead" or "behind" where the paired CI excludes 0, "tied" otherwise ("-": no pair)."""
    if not paired:
        return "-"
    if paired["ci_low"] > 0:
        return "ahead"
    return "behind" if paired["ci_high"] < 0 else "tied"


def rows_line(metrics: Mapping) -> str:
    """How many texts the record's figures are read on, and how."""
    rows = metrics["rows"]
    if "cross_fitted" not in metrics:
        return f"{rows['train']} training and {rows['test']} held-out texts (one split)"
    folds = len(metrics.get("folds") or []) or "?"
    return (
        f"{rows['all']} texts of {rows['documents']} documents, cross-fitted over {folds} "
        f"document folds (the criteria tree grown on {rows['tree_documents']} of them)"
    )
