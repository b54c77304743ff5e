"""What ``hdeval estimate`` prints: a table per LLM stage (the expected case, and the most it
can cost where that differs), or the same figures as JSON."""

from __future__ import annotations

from hdeval.pipeline.calibration import Rates
from hdeval.pipeline.estimate import Estimate
from hdeval.pipeline.project_state import ProjectState
from hdeval.pipeline.request_count import StageCost


def figures(estimate: Estimate, rates: Rates | None, state: ProjectState) -> dict:
    """The estimate as plain data: per stage and in total, expected and at most."""

    def one(cost: StageCost) -> dict:
        seconds = (
            rates.seconds(cost) if rates is not None else (0.0 if not cost.total_calls else None)
        )
        return {"calls": cost.total_calls, "prompt_tokens": cost.prompt_tokens, "seconds": seconds}

    stages = []
    for expected, upper in zip(estimate.expected, estimate.upper, strict=True):
        stages.append(
            {
                "stage": expected.stage,
                "rerun": expected.rerun,
                "cached": expected.cached,
                **one(expected),
                "calls_by_kind": dict(expected.calls),
                "at_most": one(upper),
                "notes": list(dict.fromkeys(expected.notes + upper.notes)),
            }
        )
    total = {key: _sum(s[key] for s in stages) for key in ("calls", "prompt_tokens", "seconds")}
    at_most = {key: _sum(s["at_most"][key] for s in stages) for key in total}
    return {
        "stages": stages,
        "total": {**total, "at_most": at_most},
        "assumptions": estimate.assumptions,
        "rerun": None if state.rerun is None else list(state.rerun),
        "why": state.why,
        "calibration": None
        if rates is None
        else {"speeds": rates.describe(), "calls_made": rates.calls_made},
    }


def _sum(values) -> float | None:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def render(data: dict, identity: str) -> str:
    """The table ``hdeval estimate`` prints from :func:`figures`."""
    stages, total = data["stages"], data["total"]
    bounded = any(_row(s) != _row(s["at_most"]) for s in stages)
    head = f"{'stage':<10} {'LLM calls':>9} {'cached':>7} {'prompt tokens':>13} {'time':>9}"
    if bounded:
        head += f"   {'at most: calls':>14} {'tokens':>10} {'time':>9}"
    lines = [f"judge: {identity}", _project_line(data), head + "  note"]
    for s in stages:
        line = f"{s['stage']:<10} {s['calls']:>9,} {s['cached']:>7,} {s['prompt_tokens']:>13,} "
        line += f"{_minutes(s['seconds']):>9}"
        if bounded:
            upper = s["at_most"]
            line += f"   {upper['calls']:>14,} {upper['prompt_tokens']:>10,} "
            line += f"{_minutes(upper['seconds']):>9}"
        notes = ([] if s["rerun"] else ["dvc repro skips it"]) + s["notes"]
        lines.append(line + ("  " + "; ".join(notes) if notes else ""))
    line = f"{'total':<10} {total['calls']:>9,} {'':>7} {total['prompt_tokens']:>13,} "
    line += f"{_minutes(total['seconds']):>9}"
    if bounded:
        upper = total["at_most"]
        line += f"   {upper['calls']:>14,} {upper['prompt_tokens']:>10,} "
        line += f"{_minutes(upper['seconds']):>9}"
    lines.append(line)
    lines += [f"expected case: {a}" for a in data["assumptions"]]
    calibration = data["calibration"]
    if calibration is None:
        lines.append("times: not calibrated (--no-calibrate); '?' where the judge has work")
    else:
        lines.append(f"times from the calibration: {calibration['speeds']}")
        if calibration["calls_made"]:
            lines.append(
                f"the calibration made {calibration['calls_made']} of the calls above "
                "(cached now: the run does not repeat them)"
            )
    return "\n".join(lines)


def _row(figures: dict) -> tuple:
    return figures["calls"], figures["prompt_tokens"]


def _minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.1f} min"


def _project_line(data: dict) -> str:
    if data["rerun"] is None:
        return data["why"]
    if not data["rerun"]:
        return "dvc repro would re-run nothing: the run is finished"
    return f"dvc repro would re-run: {', '.join(data['rerun'])}"
