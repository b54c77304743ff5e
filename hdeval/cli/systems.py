"""``hdeval compare-systems``: which system is better, by how much and how sure, from the rows
``hdeval score`` wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hdeval.cli.app import app, console


@app.command("compare-systems")
def compare_systems(
    scored: Annotated[
        list[Path],
        typer.Argument(help="hdeval score output (JSONL) with system_id and doc_id; several OK."),
    ],
    csv: Annotated[Path | None, typer.Option(help="Also write every figure as CSV.")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Also draw the means with their CIs (.png, .svg, .pdf).")
    ] = None,
    aspects: Annotated[
        str | None, typer.Option(help="Comma-separated aspects (default: every scored one).")
    ] = None,
    bootstrap: Annotated[int, typer.Option(min=100, help="Bootstrap draws.")] = 2000,
    alpha: Annotated[
        float, typer.Option(min=0.0001, max=0.5, help="Family-wise error rate of the pairs.")
    ] = 0.05,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
) -> None:
    """Compare systems scored on the same documents: per aspect each system's mean with a
    bootstrap CI over documents, every pair's paired difference with its CI and a Wilcoxon test
    (Holm-corrected), and a ranking that ties systems it cannot separate. The CIs include the
    evaluator's own error, drawn from each text's prediction interval, and its error of a
    system's mean, which more documents do not shrink."""
    from hdeval.errors import ConfigError
    from hdeval.systems.output import comparison_frame, method_note, tables
    from hdeval.systems.rows import document_means, read_scored
    from hdeval.systems.statistics import compare, error_sd

    for path, option in ((csv, "--csv"), (plot, "--plot")):
        if path is not None and (path.resolve() in {p.resolve() for p in scored}):
            raise ConfigError(f"{option} {path} is an input of this command; refused")
    if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ConfigError(f"--plot {plot}: give a .png, .svg or .pdf file name")
    rows = read_scored(scored)
    chosen = aspects.split(",") if aspects else rows.aspects
    unknown = [a for a in chosen if a not in rows.aspects]
    if unknown:
        raise ConfigError(f"--aspects {','.join(unknown)}: not scored (scored: {rows.aspects})")
    out = Console()
    systems, total = rows.systems, rows.table["doc_id"].nunique()
    out.print(
        f"{len(systems)} systems compared on the {len(rows.documents)} of {total} documents "
        f"that every system was scored on"
        + (f" ({rows.left_out()} texts of other documents left out)" if rows.left_out() else "")
    )
    comparisons = []
    for aspect in chosen:
        scores, widths, documents = document_means(rows, aspect)
        if not documents:
            raise ConfigError(f"{aspect}: no shared document where every system has a score")
        comparison = compare(
            aspect, systems, scores, error_sd(widths, rows.level),
            system_sd=rows.system_sd.get(aspect), n_boot=bootstrap, alpha=alpha, seed=seed,
        )  # fmt: skip
        comparisons.append(comparison)
        for table in tables(comparison):
            out.print(table)
    out.print(method_note(comparisons, bootstrap, rows.level), soft_wrap=True)
    if csv is not None:
        comparison_frame(comparisons).to_csv(csv, index=False)
        console.print(f"figures written to {csv}")
    if plot is not None:
        from hdeval.report.systems_chart import save_chart

        save_chart(comparisons, plot)
        console.print(f"chart written to {plot}")
