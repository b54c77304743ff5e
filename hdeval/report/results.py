"""The pipeline's summary: averaged agreement per scorer, DHP figures, LLM cost, a results table."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from hdeval.report.summary import agreement_of, evaluated_on

#: Display names of the comparison's entries, in table order (others follow, alphabetically).
LABELS = {
    "hdeval": "HD-Eval (exported bundle, all configured modes)",
    "prompt_only": "HD-Eval, prompt features only",
    "likelihood_only": "HD-Eval, likelihood features only",
    "without_layer_3": "HD-Eval without layer 3",
    "without_layers_2_3": "HD-Eval, layer 1 only (no decomposition)",
    "unconditioned_likelihood_only": "unconditioned likelihood, trained (no tree)",
    "text_signals_only": "the text's own signals, trained (no tree)",
    "means_only": "mean log-probabilities only, trained (GPTScore's features)",
    "averaged_scores": "criteria prompt scores averaged (untrained)",
    "direct-prompt": "direct 1-5 prompt per aspect",
    "overall-prompt:overall": "single overall 1-5 prompt",
    "likelihood": "GPTScore likelihood per aspect",
    "likelihood:unconditioned": "GPTScore likelihood, unconditioned",
    "likelihood:source_free": "likelihood without the source (fluency prior)",
    "likelihood:pmi": "PMI with the source (grounding), per token",
    "likelihood:average": "GPTScore likelihoods averaged into one score",
    "direct-prompt:average": "direct 1-5 prompts averaged into one score",
    "rouge:rouge1": "ROUGE-1 F1",
    "rouge:rouge2": "ROUGE-2 F1",
    "rouge:rougeL": "ROUGE-L F1",
}
#: (level, correlation) columns of the results table.
COLUMNS = [
    ("dataset", "pearson"),
    ("dataset", "spearman"),
    ("dataset", "kendall"),
    ("summary", "pearson"),
    ("summary", "spearman"),
]


def agreement_line(average: Mapping, levels: tuple[str, ...] = ("dataset", "summary")) -> str:
    """ "dataset pearson 0.471 [0.40, 0.54], summary pearson ..." of an aspect average (the
    ``average`` entry of :func:`hdeval.metrics.agreement`)."""
    parts = []
    for level in levels:
        value, ci = average[level]["pearson"], average[level].get("pearson_ci")
        interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        parts.append(f"{level} pearson {value:.3f}{interval}")
    return ", ".join(parts)


def run_summary(metrics: Mapping, bundle: str) -> str:
    """The last line of a run: where the bundle is, how it did, its verdicts, what to run next."""
    selection = metrics["selection"]
    verdicts = metrics.get("acceptance", {})
    gates = ", ".join(
        f"{gate} {'accepted' if v['accepted'] else 'REFUSED'}" for gate, v in verdicts.items()
    )
    return (
        f"bundle {bundle} ({selection['kind']} on {selection['features']}, fit on every "
        f"document): {evaluated_on(metrics)} "
        f"{agreement_line(agreement_of(metrics)['hdeval']['average'])}; gates: {gates or 'none'}; "
        f"report.html shows the run. Next: hdeval score --model {bundle} texts.jsonl "
        "--explain"
    )


def label_of(name: str) -> str:
    """A comparison entry's name in words (``without_coverage``: every candidate column, the
    families the bundle left out included, less that family's, fit with the aggregator's
    defaults)."""
    if name.startswith("without_") and name not in LABELS:
        return f"every signal but the {name.removeprefix('without_')} family"
    return LABELS.get(name, name)


def families_markdown(selection: Mapping) -> str:
    """What each signal family added to the proxy's CV when model selection weighed it
    (``hierarchy.min_family_gain``), and which were kept."""
    steps = selection.get("family_steps") or []
    if not steps:
        kept = ", ".join(selection.get("families") or []) or "none"
        return f"Signal families: {kept} (no selection: hierarchy.min_family_gain is null).\n"
    lines = [
        "Signal families, added one at a time (the proxy's grouped CV Pearson on the training "
        "documents; kept while one adds at least hierarchy.min_family_gain):",
        "",
        "| family | added to | CV Pearson | gain | kept |",
        "|---|---|---:|---:|---|",
    ]
    for step in steps:
        added_to = " + ".join(step["with"]) or "the other columns"
        lines.append(
            f"| {step['family']} | {added_to} | {step['cv_pearson']:.3f} | {step['gain']:+.3f} "
            f"| {'yes' if step['kept'] else ''} |"
        )
    return "\n".join(lines) + "\n"


def scorer_order(names: list[str]) -> list[str]:
    """Scorer names in table order: those of :data:`LABELS` first, the others alphabetically."""
    known = [n for n in LABELS if n in names]
    return known + sorted(n for n in names if n not in LABELS)


def figure_cell(row: pd.DataFrame) -> str:
    """ "0.457 [0.41, 0.52]" of a comparison-table row, "-" where it has no figure."""
    if row.empty or math.isnan(row["value"].iloc[0]):
        return "-"
    value, low, high = (float(row[c].iloc[0]) for c in ("value", "ci_low", "ci_high"))
    if math.isnan(low):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.2f}, {high:.2f}]"


def _dhp_cells(name: str, dhp: Mapping[str, Mapping]) -> list[str]:
    entry = dhp.get(name)
    if entry is None:
        return ["", ""]
    return ["-" if entry[k] is None else f"{entry[k]:.2f}" for k in ("D_avg_ew", "D_min_ew")]


def results_markdown(table: pd.DataFrame, dhp: Mapping[str, Mapping], metrics: Mapping) -> str:
    """A markdown table: aspect-averaged correlations with 95 % CIs, and DHP, per scorer."""
    average = table[table["aspect"] == "average"]
    header = [f"{level} {corr}" for level, corr in COLUMNS] + ["DHP D_avg^EW", "DHP D_min^EW"]
    lines = [
        "| scorer | n | " + " | ".join(header) + " |",
        "|---|---:|" + "---:|" * len(header),
    ]
    for name in scorer_order(list(dict.fromkeys(average["scorer"]))):
        rows = average[average["scorer"] == name]
        cells = [
            figure_cell(rows[(rows["level"] == level) & (rows["correlation"] == corr)])
            for level, corr in COLUMNS
        ]
        n = int(rows["n"].iloc[0])
        label = label_of(name)
        lines.append(f"| {label} | {n} | " + " | ".join(cells + _dhp_cells(name, dhp)) + " |")
    rows = metrics.get("rows", {})
    llm = metrics.get("llm", {})
    tokens = llm.get("tokens", {})
    lines += [
        "",
        f"Cross-fitted rows: {rows.get('all')} of {rows.get('documents')} documents, each "
        "predicted by a model selected and fit without its document; correlations "
        "averaged over the aspects, 95 % CIs from a document bootstrap. DHP: discernment "
        "D = log_0.05(p) with expert weights (>= 1 means discerned at p < 0.05); blank: not "
        "benchmarked (`dhp.baselines`).",
        f"Judge: `{llm.get('identity')}`; LLM calls {llm.get('llm_calls')}, cache hits "
        f"{llm.get('cache_hits')}, prompt tokens {tokens.get('prompt')} (+ {tokens.get('reused')} "
        f"reused from a KV cache), generated tokens {tokens.get('completion')}.",
    ]
    return "\n".join(lines) + "\n"


def selection_markdown(selection: Mapping, limit: int = 12) -> str:
    """Model selection's CV table (training documents only), best first, and what shipped."""
    total = len(selection["cv_table"])
    shown = f"best {limit} of {total} candidates" if total > limit else f"all {total} candidates"
    lines = [
        "Model selection by document-grouped CV on the training documents (defaults of each "
        f"aggregator; {shown}). Rises when worse: the share of training texts scored higher "
        "when every criterion score is lowered (aggregator.max_rising_share):",
        "",
        "| features | aggregator | n features | CV Pearson | rises when worse |",
        "|---|---|---:|---:|---:|",
    ]
    for row in selection["cv_table"][:limit]:
        rising = row.get("rising_share")
        lines.append(
            f"| {row['features']} | {row['kind']} | {row['n_features']} | "
            f"{row['cv_pearson']:.3f} | {'' if rising is None else f'{100 * rising:.0f} %'} |"
        )
    lines += ["", shipped_note(selection)]
    return "\n".join(lines) + "\n"


def shipped_note(selection: Mapping) -> str:
    """What model selection shipped, and why it is not the CV-best candidate where it is not."""
    shipped = (
        f"Shipped: {selection['kind']} on {selection['features']}, tuned CV Pearson "
        f"{selection['cv_pearson']:.3f}"
    )
    top = selection["cv_table"][0]
    if (top["features"], top["kind"]) != (selection["features"], selection["kind"]):
        shipped += (
            f", not the CV-best ({top['kind']} on {top['features']}, {top['cv_pearson']:.3f}): "
            "the simplest candidate within aggregator.prefer_simpler_within of the best one"
        )
        limit = selection.get("max_rising_share")  # None: the check was off (or not recorded)
        if limit is not None:
            shipped += f" that aggregator.max_rising_share ({limit:g}) allows"
    return shipped + "."


def acceptance_markdown(verdicts: list[Mapping]) -> str:
    """One line per acceptance gate: accepted or refused, with the figures compared."""
    lines = ["Acceptance:", ""]
    for verdict in verdicts:
        lines.append(
            f"- {'accepted' if verdict['accepted'] else '**refused**'}: {verdict['message']}"
        )
    return "\n".join(lines) + "\n"


def layers_markdown(layers: Mapping[str, Mapping]) -> str:
    """One line per layer: features, proxy CV Pearson, modes scored and what each added."""
    lines = [
        "Criteria tree, layer by layer (proxy aggregator, grouped CV on training documents):",
        "",
    ]
    for number, layer in layers.items():
        gains = ", ".join(f"{m} {g:+.3f}" for m, g in (layer.get("mode_gains") or {}).items())
        line = (
            f"- layer {number}: {layer['n_features']} features "
            f"({'+'.join(layer.get('modes') or [])}), CV Pearson {layer['cv_pearson']:.3f}"
        )
        if gains:
            line += f"; CV gain of each mode: {gains}"
        if layer.get("stopped"):
            line += f"; {layer['stopped']}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def evaluation_plots(predicted: pd.DataFrame, test, layers: list[dict], out: Path) -> None:
    """DVC plot tables: cross-fitted prediction vs human per row, CV r by layer, importance."""
    rows = [
        {
            "aspect": aspect,
            "id": sample_id,
            "predicted": value,
            "human": float(test.targets.at[sample_id, aspect]),
        }
        for aspect in predicted.columns
        for sample_id, value in predicted[aspect].dropna().items()
    ]
    pd.DataFrame(rows).to_csv(out / "predicted_vs_human.csv", index=False)
    pd.DataFrame([{"layer": r["layer"], "cv_pearson": r["cv_pearson"]} for r in layers]).to_csv(
        out / "correlation_by_layer.csv", index=False
    )
    final = sorted(layers[-1]["importances"].items(), key=lambda kv: -kv[1])
    pd.DataFrame([{"criterion": k, "importance": v} for k, v in final]).to_csv(
        out / "importance.csv", index=False
    )


def reading_markdown(mean_abs: pd.DataFrame, top: int = 4) -> str:
    """What the shipped aggregator reads for each aspect: its ``top`` feature columns by mean
    |SHAP| on the training texts, named in words (``mean_abs_shap.csv`` of the explain stage)."""
    lines = [
        "What the shipped evaluator reads, per aspect: its largest mean |SHAP| contributions on "
        "the training texts (plots/explain has every feature):",
        "",
    ]
    for aspect in [c for c in mean_abs.columns if c != "meaning"]:
        readings = top_readings(mean_abs, aspect, top)
        parts = [f"{meaning} `{f}` {v:.3f}" for meaning, f, v in readings]
        lines.append(f"- {aspect}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def top_readings(mean_abs: pd.DataFrame, aspect: str, top: int = 4) -> list[tuple[str, str, float]]:
    """(meaning in words, feature column, mean |SHAP|) of the ``top`` features an aspect reads
    most, those with any contribution."""
    ranked = mean_abs[aspect].sort_values(ascending=False).head(top)
    return [(str(mean_abs.at[f, "meaning"]), str(f), float(v)) for f, v in ranked.items() if v > 0]


def left_out_markdown(left_out: Mapping[str, str]) -> str:
    """Which rows a run could not compute, and why (empty when none was left out)."""
    if not left_out:
        return ""
    lines = [f"- {what}: {why}" for what, why in left_out.items()]
    return "\nLeft out of this run (no number is shown for them):\n\n" + "\n".join(lines) + "\n"
