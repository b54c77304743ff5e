"""What a run record says of a run's cost, for the results page: minutes in the stages that
call the judge and the CPU they ran on, whether the answers came from an earlier run's result
cache, and docs/cost.md's table of each LLM stage's calls, prompt tokens and minutes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path


def _minutes(seconds: float | None) -> str:
    return "not recorded" if not seconds else f"{seconds / 60:.1f}"


def from_cache(llm: Mapping) -> bool:
    """Whether a run's answers all came from the result cache of an earlier run."""
    return bool(llm.get("cache_hits")) and not llm["llm_calls"]


def _partly_from_cache(llm: Mapping) -> bool:
    """Whether a run that computed answers read its first stage's from an earlier run: a cold
    run's layer@1 asks the judge first, so it finds none of its answers cached."""
    first = llm.get("stages", {}).get("layer@1", {})
    return bool(llm["llm_calls"] and first.get("cache_hits") and not first.get("llm_calls"))


def run_minutes(llm: Mapping) -> str:
    """A run's minutes, marked where its answers came from the cache."""
    minutes, timed = _minutes(llm.get("seconds")), bool(llm.get("seconds"))
    if timed and from_cache(llm):
        return minutes + " (answers cached)"
    return minutes + (" (partly cached)" if timed and _partly_from_cache(llm) else "")


def time_and_cpu(metrics: Mapping) -> str:
    """Where the record has them, the minutes in the stages that call the judge and the CPU; a
    run whose answers came from the result cache says so (its minutes are not a cold run's)."""
    llm = metrics["llm"]
    cpu, seconds = metrics.get("machine", {}).get("cpu"), llm.get("seconds")
    if not (cpu and seconds):
        return "its time and CPU are not recorded (a record written before runs recorded them)"
    line = f"{seconds / 60:.1f} min in the stages that call the judge, on {cpu}"
    if from_cache(llm):
        line += (
            f" ({llm['cache_hits']:,} answers read from the result cache of an earlier run, "
            "so not a cold run's time: docs/benchmarks.md has that)"
        )
    elif _partly_from_cache(llm):
        line += (
            f" ({llm['llm_calls']:,} computed, the rest read from the result cache of an earlier "
            "run, so not a cold run's time: docs/benchmarks.md has that)"
        )
    return line


def cost_table(root: Path, record: str = "metrics.json") -> str:
    """docs/cost.md's table: each LLM stage's calls, prompt tokens and minutes in a run record."""
    metrics = json.loads((root / record).read_text())
    llm = metrics["llm"]
    cpu = metrics.get("machine", {}).get("cpu", "a CPU the record does not name")
    lines = [
        f"Judge `{llm['identity']}` on {cpu}:",
        "",
        "| stage | LLM calls | answers from the cache | prompt tokens | minutes |",
        "|---|---:|---:|---:|---:|",
    ]
    for stage, cost in llm["stages"].items():
        lines.append(
            f"| {stage} | {cost['llm_calls']:,} | {cost['cache_hits']:,} | "
            f"{cost['tokens']['prompt']:,} | {_minutes(cost.get('seconds'))} |"
        )
    lines.append(
        f"| **all** | {llm['llm_calls']:,} | {llm['cache_hits']:,} | "
        f"{llm['tokens']['prompt']:,} | {_minutes(llm.get('seconds'))} |"
    )
    if from_cache(llm):
        lines += [
            "",
            "Every answer of this record came from the result cache of an earlier run, so it "
            "computed nothing: a cold run's calls, tokens and minutes per stage are in "
            "[benchmarks.md](benchmarks.md).",
        ]
    return "\n".join(lines) + "\n"
