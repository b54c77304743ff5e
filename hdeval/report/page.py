"""The report's sections as plain data for its template: the verdict, every scorer side by side,
model selection, what each aspect reads, and the cost of the run."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from hdeval.report.charts import BASELINE, BUNDLE, OTHER, PEER, ScorerPoint, scorers_chart
from hdeval.report.record import RunRecord
from hdeval.report.results import (
    COLUMNS,
    figure_cell,
    label_of,
    scorer_order,
    shipped_note,
    top_readings,
)
from hdeval.report.summary import agreement_of, evaluated_on

#: What re-runs a stage that a run skipped (``hdeval train --no-gates`` stops after explain).
RUN_GATES = (
    "hdeval train --no-gates skips it; dvc repro, or hdeval train with its default --gates, runs it"
)


def interval(value: float | None, low: float | None = None, high: float | None = None) -> str:
    """ "0.457 [0.41, 0.52]", without the CI where there is none, "n/a" without a value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.2f}, {high:.2f}]"


def paired(difference: Mapping | None) -> str:
    """ "+0.066 [0.02, 0.11]" of a paired difference (keys difference, ci_low, ci_high)."""
    if not difference:
        return "n/a"
    low, high = difference.get("ci_low"), difference.get("ci_high")
    text = f"{difference['difference']:+.3f}"
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        text += f" [{low:.2f}, {high:.2f}]"
    return text


def label(name: str, peer: str | None = None) -> str:
    """A scorer's display name; the published peer says it is one."""
    shown = label_of(name)
    return f"{shown} (published peer)" if name == peer else shown


@dataclass
class Verdict:
    """The verdict line: the bundle against the best same-judge baseline and the published peer,
    and each gate with its reason; ``refused`` holds the reasons of the gates that refused."""

    what: str
    bundle: str
    baseline: str
    peer: str
    gates: list[dict] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    run: bool = True


def verdict(metrics: Mapping) -> Verdict:
    """The verdict of a run's ``metrics``: its acceptance gates and published peer."""
    gates = metrics.get("acceptance") or {}
    peer = metrics.get("peer")
    peer_text = "no published peer for this data"
    if peer:
        peer_text = (
            f"published peer {peer['name']} {interval(peer['value'], peer['low'], peer['high'])}"
            f", paired difference {paired(peer.get('paired'))}"
        )
        if (peer.get("paired") or {}).get("n"):
            peer_text += f" on {peer['paired']['n']} texts"
    average = agreement_of(metrics)["hdeval"]["average"]
    read = evaluated_on(metrics)
    if not gates:
        dataset = average["dataset"]
        return Verdict(
            what=f"{read} dataset pearson",
            bundle=interval(dataset["pearson"], *(dataset.get("pearson_ci") or (None, None))),
            baseline=f"acceptance gates not run ({RUN_GATES})",
            peer=peer_text,
            run=False,
        )
    figures = gates.get("baselines", {})
    level, correlation = figures.get("level", "dataset"), figures.get("correlation", "pearson")
    own = figures.get("hdeval") or {}
    best = figures.get("best")
    baseline = "no same-judge baseline in the comparison"
    if best:
        against = [p for p in figures.get("paired", []) if p["against"] == best]
        baseline = (
            f"best same-judge baseline {label(best)} {interval(**figures[best])}, paired "
            f"difference {paired(against[0] if against else None)}"
        )
    return Verdict(
        what=f"{read} {level} {correlation}",
        bundle=interval(**own) if own else "n/a",
        baseline=baseline,
        peer=peer_text,
        gates=[
            {"gate": gate, "accepted": v["accepted"], "message": v["message"]}
            for gate, v in gates.items()
        ],
        refused=[v["message"] for v in gates.values() if not v["accepted"]],
    )


def scorers(record: RunRecord) -> dict | None:
    """Every scorer of the comparison: a table of its aspect-averaged correlations with CIs and
    DHP figures, and a chart of the dataset-level Pearson with CIs. None: baselines not run."""
    if record.compare is None:
        return None
    metrics = record.metrics
    average = record.compare[record.compare["aspect"] == "average"]
    peer = (metrics.get("peer") or {}).get("name")
    best = (metrics.get("acceptance", {}).get("baselines") or {}).get("best")
    dhp = metrics.get("dhp") or {}
    rows, points = [], []
    for name in scorer_order(list(dict.fromkeys(average["scorer"]))):
        table = average[average["scorer"] == name]
        cells = [
            _split(figure_cell(table[(table["level"] == lv) & (table["correlation"] == c)]))
            for lv, c in COLUMNS
        ]
        entry = dhp.get(name) or {}
        ews = [entry.get(k) for k in ("D_avg_ew", "D_min_ew")]
        role = {"hdeval": "bundle", best: "baseline", peer: "peer"}.get(name, "")
        rows.append(
            {
                "label": label(name, peer),
                "n": "" if pd.isna(table["n"].iloc[0]) else int(table["n"].iloc[0]),
                "cells": cells,
                "dhp": ["" if not entry else "-" if v is None else f"{v:.2f}" for v in ews],
                "role": role,
            }
        )
        first = table[(table["level"] == "dataset") & (table["correlation"] == "pearson")]
        if not first.empty and not math.isnan(float(first["value"].iloc[0])):
            value, low, high = (float(first[k].iloc[0]) for k in ("value", "ci_low", "ci_high"))
            colour = {"bundle": BUNDLE, "baseline": BASELINE, "peer": PEER}.get(role, OTHER)
            points.append(ScorerPoint(label(name, peer), value, low, high, colour))
    header = list(COLUMNS)
    chart = scorers_chart(points, "cross-fitted dataset Pearson r, averaged over the aspects")
    return {"header": header, "rows": rows, "chart": chart}


def _split(cell: str) -> tuple[str, str]:
    """("0.457", "[0.41, 0.52]") of a table cell: the value and its CI, shown below it."""
    value, _, ci = cell.partition(" ")
    return value, ci


def selection(metrics: Mapping, limit: int = 12) -> dict:
    """Model selection's CV table, best first (the shipped candidate always shown)."""
    chosen = metrics["selection"]
    table = chosen["cv_table"]
    shipped = (chosen["features"], chosen["kind"])
    rows = [
        {**row, "shipped": (row["features"], row["kind"]) == shipped}
        for i, row in enumerate(table)
        if i < limit or (row["features"], row["kind"]) == shipped
    ]
    return {"rows": rows, "total": len(table), "note": shipped_note(chosen)}


def readings(record: RunRecord, top: int = 4) -> dict[str, list[tuple[str, str, float]]]:
    """Per aspect, the features the shipped aggregator reads most, in words."""
    if record.mean_abs_shap is None:
        return {}
    aspects = [a for a in record.aspects if a in record.mean_abs_shap.columns]
    return {a: top_readings(record.mean_abs_shap, a, top) for a in aspects}


def cost(record: RunRecord) -> dict:
    """Time, LLM calls, cache hits and tokens per stage, their totals, and the judges."""
    llm = record.metrics.get("llm", {})
    stages = llm.get("stages", {})
    rows = [{"stage": name, **_cost_row(figures)} for name, figures in stages.items()]
    tokens: Counter[str] = Counter()
    for stage in stages.values():
        tokens.update(stage.get("tokens", {}))
    timed = [s["seconds"] for s in stages.values() if "seconds" in s]
    total = _cost_row(
        {
            "llm_calls": sum(s.get("llm_calls", 0) for s in stages.values()),
            "cache_hits": sum(s.get("cache_hits", 0) for s in stages.values()),
            "tokens": tokens,
            "seconds": sum(timed) if timed else None,
        }
    )
    decomposers = sorted(
        {r["decomposer"]["identity"] for r in record.layers if r.get("decomposer")}
    )
    return {
        "rows": rows,
        "total": total,
        "identity": llm.get("identity", "n/a"),
        "cpu": record.metrics.get("machine", {}).get("cpu"),
        "decomposers": decomposers,
        "failed": llm.get("failed_scores"),
        "truncated": llm.get("truncated_samples"),
    }


def _cost_row(figures: Mapping) -> dict:
    tokens = figures.get("tokens") or {}
    calls, hits = int(figures.get("llm_calls", 0)), int(figures.get("cache_hits", 0))
    seconds = figures.get("seconds")
    return {
        "time": "" if seconds is None else _duration(float(seconds)),
        "calls": f"{calls:,}",
        "hits": f"{hits:,}",
        "hit_rate": f"{100 * hits / (calls + hits):.0f} %" if calls + hits else "",
        "prompt": f"{int(tokens.get('prompt', 0)):,}",
        "reused": f"{int(tokens.get('reused', 0)):,}",
        "completion": f"{int(tokens.get('completion', 0)):,}",
    }


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
