"""The interval coverage and the system ranking (metrics.json's ``intervals`` and ``systems``,
:mod:`hdeval.report.systems`) as the report page's rows and results.md's tables."""

from __future__ import annotations

from collections.abc import Mapping


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def interval_rows(figures: Mapping | None) -> dict | None:
    """The coverage table (None: the run has no intervals)."""
    if not figures:
        return None
    rows = [
        {
            "aspect": aspect,
            "coverage": f"{100 * f['coverage']:.1f} %",
            "width": f"{f['mean_width']:.2f}",
            "range": f"{f['range_width']:g}",
            "n": f["n"],
        }
        for aspect, f in figures["aspects"].items()
    ]
    return {"level_percent": f"{100 * figures['level']:g}", "method": figures["method"],
            "rows": rows}  # fmt: skip


def system_rows(figures: Mapping | None) -> list[dict] | None:
    """The system-ranking table (None: the labels name fewer than two systems)."""
    if not figures:
        return None
    return [
        {
            "aspect": aspect,
            "systems": f["systems"],
            "documents": f["documents"],
            "tau": f"{f['kendall_tau']:.3f}",
            "right": f"{_share(f['pairs_right'])} of {f['pairs']}",
            "called": f["called_different"],
            "called_right": _share(f["called_right"]),
        }
        for aspect, f in figures.items()
    ]


def intervals_markdown(figures: Mapping | None) -> str:
    """results.md's coverage table ("" without intervals)."""
    table = interval_rows(figures)
    if table is None:
        return ""
    lines = [
        f"## Prediction intervals ({table['level_percent']} %, {table['method']})",
        "",
        "| aspect | coverage | mean width | score range | texts |",
        "|---|---:|---:|---:|---:|",
        *(f"| {r['aspect']} | {r['coverage']} | {r['width']} | {r['range']} | {r['n']} |"
          for r in table["rows"]),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def systems_markdown(figures: Mapping | None) -> str:
    """results.md's system-ranking table ("" without systems)."""
    rows = system_rows(figures)
    if rows is None:
        return ""
    lines = [
        "## System ranking against the humans (cross-fitted)",
        "",
        "| aspect | systems | documents | Kendall τ | pairs in the humans' order | called "
        "different | of those in the humans' order |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(f"| {r['aspect']} | {r['systems']} | {r['documents']} | {r['tau']} | {r['right']} | "
          f"{r['called']} | {r['called_right']} |" for r in rows),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"
