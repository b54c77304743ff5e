"""A system comparison as tables (one per aspect, for the terminal), one CSV table, and the
sentence that says what its CIs account for."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from hdeval.systems.statistics import Comparison

#: CSV columns, in order.
CSV_COLUMNS = [
    "aspect",
    "kind",
    "system",
    "other",
    "value",
    "ci_low",
    "ci_high",
    "rank",
    "p",
    "p_holm",
    "significant",
    "n_documents",
    "errors_propagated",
]


def method_note(comparisons: Sequence[Comparison], n_boot: int, level: float | None) -> str:
    """What the CIs and the test are, and whether the evaluator's error is in them (its error
    of a system's mean named per aspect of ``comparisons``)."""
    comparison = comparisons[0]
    ci = f"{100 * comparison.confidence:g} % CIs from {n_boot} bootstrap draws of the documents"
    if comparison.propagated and level is not None:
        error = (
            f", each text's evaluator error drawn from its {100 * level:g} % prediction "
            "interval (a normal error with that interval)"
        )
    else:
        error = (
            "; the evaluator's error is NOT propagated: the rows carry no prediction intervals "
            "(a bundle trained without evaluate.interval_level)"
        )
    measured = {c.aspect: c.system_sd for c in comparisons}
    if any(sd is not None for sd in measured.values()):
        listed = "; ".join(
            f"none for {aspect}" if sd is None else f"sd {sd:.3g} for {aspect}"
            for aspect, sd in measured.items()
        )
        error += (
            f", and each system's mean moved by the evaluator's error of a system's mean "
            f"({listed}; measured on the bundle's labelled systems)"
        )
    elif comparison.propagated:
        error += (
            "; the rows carry no error of a system's mean (a bundle trained on fewer than 3 "
            "systems, or before it was measured)"
        )
    test = (
        f". Pairs: Wilcoxon signed-rank test over documents, Holm-corrected; different when "
        f"Holm p < {comparison.alpha:g} and the CI excludes 0. A rank is 1 + the systems "
        "found better."
    )
    return ci + error + test


def comparison_frame(comparisons: Sequence[Comparison]) -> pd.DataFrame:
    """Every aspect's systems and pairs as one long table (:data:`CSV_COLUMNS`)."""
    rows = []
    for c in comparisons:
        for s in c.systems:
            rows.append(
                {
                    "aspect": c.aspect,
                    "kind": "system",
                    "system": s.system,
                    "other": "",
                    "value": s.mean,
                    "ci_low": s.low,
                    "ci_high": s.high,
                    "rank": s.rank,
                    "n_documents": c.n_documents,
                    "errors_propagated": c.propagated,
                }
            )
        for p in c.pairs:
            rows.append(
                {
                    "aspect": c.aspect,
                    "kind": "difference",
                    "system": p.first,
                    "other": p.second,
                    "value": p.difference,
                    "ci_low": p.low,
                    "ci_high": p.high,
                    "p": p.p,
                    "p_holm": p.p_holm,
                    "significant": p.significant,
                    "n_documents": c.n_documents,
                    "errors_propagated": c.propagated,
                }
            )
    frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
    frame["rank"] = frame["rank"].astype("Int64")
    return frame


def _ci(value: float, low: float, high: float, signed: bool = False) -> str:
    return (
        f"{value:+.3f} [{low:+.2f}, {high:+.2f}]"
        if signed
        else f"{value:.3f} [{low:.2f}, {high:.2f}]"
    )


def _p(value: float) -> str:
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def tables(comparison: Comparison) -> list:
    """Rich tables of one aspect: the systems (ranked) and the pairs."""
    from rich.table import Table

    share = f"{100 * comparison.confidence:g} % CI"
    ranked = Table(title=f"{comparison.aspect}: {comparison.n_documents} documents")
    for name, justify in (("rank", "right"), ("system", "left"), (f"mean [{share}]", "right")):
        ranked.add_column(name, justify=justify)
    for s in comparison.systems:
        ranked.add_row(str(s.rank), s.system, _ci(s.mean, s.low, s.high))
    pairs = Table(title=f"{comparison.aspect}: paired differences")
    for name in ("pair", f"difference [{share}]", "p", "p (Holm)", "verdict"):
        pairs.add_column(name, justify="left" if name in ("pair", "verdict") else "right")
    for p in comparison.pairs:
        verdict = "higher" if p.significant else "not separated"
        pairs.add_row(
            f"{p.first} - {p.second}",
            _ci(p.difference, p.low, p.high, signed=True),
            _p(p.p),
            _p(p.p_holm),
            verdict,
        )
    return [ranked, pairs]
