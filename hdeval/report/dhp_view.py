"""The DHP section: discernment per perturbation and aspect of the bundle (a chart), every
benchmarked scorer's summary figures, and what was not discerned."""

from __future__ import annotations

import math

import numpy as np

from hdeval.report.charts import dhp_chart
from hdeval.report.record import RunRecord
from hdeval.report.results import label_of

#: Where DHP's D crosses p = 0.05; the acceptance gate's threshold where the run has one.
DISCERNED = 1.0


def dhp_section(record: RunRecord, scorer: str = "hdeval") -> dict | None:
    """None where DHP did not run; else the bundle's chart, the summary row of every scorer
    benchmarked, the perturbations the bundle did not discern and the aspects where it fell
    below the threshold, and whether same-judge baselines were benchmarked beside it."""
    figures = record.metrics.get("dhp")
    if not figures:
        return None
    gate = (record.metrics.get("acceptance") or {}).get("dhp") or {}
    threshold = float(gate.get("threshold", DISCERNED))
    rows = [
        {
            "label": label_of(name),
            "bundle": name == scorer,
            "avg": _d(entry.get("D_avg_ew")),
            "min": _d(entry.get("D_min_ew")),
            "n_texts": entry.get("n_texts"),
            "failed": ", ".join(entry.get("failed") or []),
        }
        for name, entry in figures.items()
    ]
    table = record.dhp.get(scorer)
    section = {
        "threshold": threshold,
        "rows": rows,
        "baselines": [n for n in figures if n != scorer],
        "chart": None,
        "missed": [],
        "weak_aspects": [],
    }
    if table is None:
        return section
    aspects = [a for a in record.aspects if f"p:{a}" in table.columns]
    section["chart"] = dhp_chart(table, aspects, threshold)
    probes = table["probe"].astype(bool)
    for name, row in table.iterrows():
        if probes[name] and _finite(row.get("D_reward_ew")) >= 1.0:
            section["missed"].append(
                f"{name} (probe): it raised the scores, reward D^EW {row['D_reward_ew']:.2f}"
            )
        elif not probes[name] and _finite(row["D_ew"], math.inf) < threshold:
            section["missed"].append(f"{name}: D^EW {row['D_ew']:.2f} < {threshold:g}")
        if probes[name] or _finite(row["D_ew"], math.inf) < threshold:
            continue  # a probe fails on rising scores only; a missed one is listed whole
        for aspect in aspects:
            p = _finite(row[f"p:{aspect}"], math.nan)
            d = math.log(p) / math.log(0.05) + 0.0 if 0 < p <= 1 else math.nan
            if d < threshold:
                section["weak_aspects"].append(f"{name} on {aspect} (D {d:.2f})")
    return section


def _d(value: float | None) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.2f}"


def _finite(value: object, default: float = 0.0) -> float:
    """``value`` as a float, ``default`` where it is missing or NaN."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
    return default if math.isnan(number) else number
