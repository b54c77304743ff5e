"""docs/results.md, the README's results table and docs/cost.md's table (its figures read by
:mod:`hdeval.report.run_cost`), generated from the committed run records, so no figure is typed
twice: ``metrics.json`` (the default run) and ``docs/runs/<name>.json`` (each preset's, and the
default split with the bigger judge). ``python -m hdeval.report.results_page`` rewrites them; a
test checks they are up to date.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from hdeval.dhp.rules import INJECTION_PROBE
from hdeval.report.results import label_of
from hdeval.report.run_cost import cost_table, run_minutes, time_and_cpu
from hdeval.report.summary import agreement_of, evaluated_on, rows_line, standing

#: The runs on the page, in order: record file (relative to the repository), title, what it is.
RUNS = (
    ("metrics.json", "SummEval (the default run)", "`params.yaml`"),
    ("docs/runs/summeval_1.5b.json", "SummEval with the 1.5B judge",
     "`params.yaml` with `llm.model: qwen2.5-coder-1.5b-instruct-q4_k_m`"),
    ("docs/runs/summeval_80.json", "SummEval, all 80 development documents",
     "`params.yaml` with `data.n_docs: null`"),
    ("docs/runs/sfres.json", "Data-to-text: SFRES", "`params/sfres.yaml`"),
    ("docs/runs/sfhot.json", "Data-to-text: SFHOT", "`params/sfhot.yaml`"),
    ("docs/runs/topical_chat.json", "Dialogue: Topical-Chat, 1.5B judge",
     "`params/topical_chat.yaml`"),
)  # fmt: skip
#: The learning-curve benchmark's table (its chart beside it, as .png), and its section's title.
LEARNING_CURVE = Path("docs/learning_curve.csv")
LEARNING_TITLE = "How many labels? SummEval, 80 documents, cross-fitted"
#: Same-judge single signals and baselines shown beside the bundle (when the run has them).
SHOWN = (
    "likelihood",
    "likelihood:unconditioned",
    "likelihood:pmi",
    "likelihood:source_free",
    "direct-prompt",
    "rouge:rouge1",
)

INTRO = """# Results

Generated from the committed run records (`metrics.json`, `docs/runs/*.json`) by
`python -m hdeval.report.results_page` (which also writes the README's table and docs/cost.md's);
each run's record names its CPU, judge and time.
A record's figures are cross-fitted over every row of its documents (each text predicted by a
model whose selection and fit never saw its document), or, in a record that says "held-out", read
on one split's held-out documents. Pearson r averaged over the aspects, with 95 % CIs from a
bootstrap over documents; a paired difference compares two scorers on the same drawn
documents. "Ahead" and "behind" mean the paired CI excludes 0; otherwise "tied".
DHP: D = log₀.₀₅ p with expert weights, ≥ 1 means discerned at p < 0.05.
"""


def _ci(entry: Mapping, key: str = "pearson") -> str:
    value, ci = entry.get(key), entry.get(f"{key}_ci")
    if value is None:
        return "-"
    return f"{value:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _paired(p: Mapping | None) -> str:
    if not p:
        return "-"
    return f"{p['difference']:+.3f} [{p['ci_low']:.2f}, {p['ci_high']:.2f}]"


def run_section(title: str, setup: str, metrics: Mapping) -> str:
    """One run: setup, the table of scorers, where the bundle stands against the best same-judge
    baseline and the peer, gates, families and what was left out."""
    llm, selection = metrics["llm"], metrics["selection"]
    lines = [
        f"## {title}",
        "",
        f"{setup}: {rows_line(metrics)}; judge "
        f"`{llm['identity']}`; {llm['llm_calls']} LLM calls; {time_and_cpu(metrics)}. Shipped: "
        f"{selection['kind']} on {selection['features']}, signal families "
        f"{', '.join(selection.get('families') or []) or 'none'}.",
        "",
        "| scorer | dataset r | summary-level r | DHP D_min^EW |",
        "|---|---:|---:|---:|",
    ]
    held, dhp = agreement_of(metrics), metrics.get("dhp", {})
    peer = metrics.get("peer")

    def dhp_cell(name: str) -> str:
        value = dhp.get(name, {}).get("D_min_ew")
        return "" if value is None else f"{value:.2f}"

    bundle = held["hdeval"]["average"]
    lines.append(
        f"| **hdeval bundle** | **{_ci(bundle['dataset'])}** | {_ci(bundle['summary'])} "
        f"| {dhp_cell('hdeval')} |"
    )
    if peer is not None:
        lines.append(
            f"| published peer: {peer['name']} | {peer['value']:.3f} [{peer['low']:.2f}, "
            f"{peer['high']:.2f}] | | |"
        )
    baselines = metrics.get("baselines", {})
    for name in SHOWN:
        if name in baselines:
            entry = baselines[name]
            lines.append(
                f"| {label_of(name)} | {_ci(entry['dataset'])} | {_ci(entry['summary'])} "
                f"| {dhp_cell(name)} |"
            )
    for name, entry in held.items():
        if name.startswith("without_") or name == "text_signals_only":
            average = entry["average"]
            lines.append(
                f"| {label_of(name)} | {_ci(average['dataset'])} | {_ci(average['summary'])} | |"
            )
    gate = metrics.get("acceptance", {}).get("baselines", {})
    best = gate.get("best")
    paired = next((p for p in gate.get("paired", []) if p["against"] == best), None)
    lines.append("")
    if best is not None:
        lines.append(
            f"- Bundle minus the best same-judge baseline ({best}), paired: {_paired(paired)}: "
            f"**{standing(paired)}**."
        )
    if peer is not None:
        against = peer.get("paired")
        lines.append(
            f"- Bundle minus {peer['name']}, paired: {_paired(against)}: **{standing(against)}**."
        )
    for gate_name, verdict in metrics.get("acceptance", {}).items():
        state = "accepted" if verdict["accepted"] else "**refused**"
        lines.append(f"- Gate {gate_name}: {state}.")
    cut = dhp.get("hdeval", {}).get("lower", {}).get("first_half")
    if cut:
        shares = ", ".join(
            f"{'mean of aspects' if m == 'mean' else m} {100 * v:.0f} %"
            for m, v in cut.items()
            if v is not None
        )
        lines.append(f"- The text cut to its first half scored lower than the whole: {shares}.")
    failed = dhp.get("hdeval", {}).get("failed") or []
    missed = [name for name in failed if name != INJECTION_PROBE]
    if missed:
        lines.append(f"- DHP did not discern: {', '.join(missed)}.")
    if INJECTION_PROBE in failed:
        lines.append(
            "- DHP's injection probe (a sentence asking for top marks) was scored significantly "
            "higher than the text without it (D >= 1)."
        )
    for step in selection.get("family_steps") or []:
        if step["kept"] or not step["with"]:
            added = " + ".join(step["with"]) or "the base signals"
            lines.append(
                f"- Family {step['family']} added to {added}: CV {step['gain']:+.3f}"
                f"{' (kept)' if step['kept'] else ''}."
            )
    for what, why in metrics.get("left_out", {}).items():
        lines.append(f"- Left out: {what}: {why}.")
    return "\n".join(lines) + "\n"


def summary_table(root: Path) -> str:
    """The README's table: one row per run with a record, the bundle against its best
    same-judge baseline and the published peer, DHP and time."""
    lines = [
        "| run | rows | bundle r | best same-judge baseline | bundle minus it, paired "
        "| published peer | bundle minus peer, paired | DHP D_min^EW | minutes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for record, title, _ in RUNS:
        path = root / record
        if not path.is_file():
            continue
        metrics = json.loads(path.read_text())
        bundle = agreement_of(metrics)["hdeval"]["average"]["dataset"]
        gate = metrics.get("acceptance", {}).get("baselines", {})
        best = gate.get("best")
        baseline = f"{gate[best]['value']:.3f} ({best})" if best in gate else "-"
        paired = next((p for p in gate.get("paired", []) if p["against"] == best), None)
        peer = metrics.get("peer")
        published = f"{peer['value']:.3f} ({peer['name']})" if peer else "none"
        against = peer.get("paired") if peer else None
        dhp = metrics.get("dhp", {}).get("hdeval", {}).get("D_min_ew")
        read = evaluated_on(metrics)
        rows = metrics["rows"]
        count = rows["all"] if "all" in rows else rows["test"]
        lines.append(
            f"| {title} | {count} {read} | {_ci(bundle)} | {baseline} | "
            f"{_paired(paired)} {standing(paired)} | {published} | "
            f"{_paired(against) + ' ' + standing(against) if peer else '-'} | "
            f"{'-' if dhp is None else f'{dhp:.2f}'} | {run_minutes(metrics['llm'])} |"
        )
    return "\n".join(lines) + "\n"


def learning_curve_table(summary: pd.DataFrame) -> str:
    """``benchmarks/learning_curve.py``'s table: a row per number of training documents."""
    lines = [
        "| training documents per fold | training texts per fold | cross-fitted r, mean of draws "
        "| range over draws | CI (first draw) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for _, row in summary.iterrows():
        lines.append(
            f"| {int(row['documents'])} | {round(row['texts'])} | {row['mean']:.3f} | "
            f"{row['low']:.3f}-{row['high']:.3f} | [{row['ci_low']:.2f}, {row['ci_high']:.2f}] |"
        )
    return "\n".join(lines) + "\n"


def learning_curve_section(root: Path) -> str:
    """How many labels a run needs, from ``docs/learning_curve.csv`` where it is."""
    path = root / LEARNING_CURVE
    if not path.is_file():
        return f"## {LEARNING_TITLE}\n\nNot measured at this version (no `{LEARNING_CURVE}`).\n"
    summary, chart = pd.read_csv(path), LEARNING_CURVE.with_suffix(".png")
    what = (
        f"Every text of the record cross-fitted over its {int(summary['folds'].iloc[0])} outer "
        "document folds, as `evaluate` does, except that each fold's whole model selection and "
        "fit see only a random draw of that many of its training documents (`python "
        f"benchmarks/learning_curve.py --run RUN --out {chart}`; no LLM call)."
    )
    return (
        f"## {LEARNING_TITLE}\n\n{what}\n\n{learning_curve_table(summary)}\n"
        f"![cross-fitted r against training documents]({chart.name})\n"
    )


def results_page(root: Path) -> str:
    """The whole page from the records under ``root``; a run without a record says so."""
    parts = [INTRO]
    for record, title, setup in RUNS:
        path = root / record
        if not path.is_file():
            parts.append(f"## {title}\n\nNot measured at this version (no `{record}`).\n")
            continue
        parts.append(run_section(title, setup, json.loads(path.read_text())))
    parts.append(learning_curve_section(root))
    return "\n".join(parts)


#: The generated blocks of other documents: file, opening marker, closing marker, generator.
BLOCKS = (
    ("README.md", "<!-- results: generated -->\n", "<!-- end of results -->", summary_table),
    ("docs/cost.md", "<!-- cost: generated -->\n", "<!-- end of cost -->", cost_table),
)


def _span(text: str, opening: str, closing: str) -> tuple[int, int]:
    start = text.index(opening) + len(opening)
    return start, text.index(closing, start)


def block(text: str, opening: str, closing: str) -> str:
    """The generated part of ``text`` between its markers."""
    start, end = _span(text, opening, closing)
    return text[start:end]


def write_docs(root: Path) -> None:
    """Rewrite docs/results.md and every generated block from the run records under ``root``."""
    (root / "docs" / "results.md").write_text(results_page(root))
    for name, opening, closing, make in BLOCKS:
        path = root / name
        text = path.read_text()
        start, end = _span(text, opening, closing)
        path.write_text(text[:start] + make(root) + text[end:])


if __name__ == "__main__":
    write_docs(Path("."))
