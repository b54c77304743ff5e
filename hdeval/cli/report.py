"""``hdeval report``: a run's outputs on one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hdeval.cli.app import app, console


@app.command("report")
def report_command(
    run_dir: Annotated[
        Path, typer.Argument(help="The run's directory: where dvc repro or hdeval train ran.")
    ] = Path("."),
    out: Annotated[
        Path | None, typer.Option(help="The page to write (default: RUN_DIR/report.html).")
    ] = None,
) -> None:
    """Render RUN_DIR's report.html from its outputs, as the pipeline's report stage does;
    the stages a run skipped read as "not run"."""
    from hdeval.report.render import write_report

    console.print(f"report written to {write_report(run_dir, out)}")
