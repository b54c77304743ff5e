"""Command-line interface: ``hdeval --help``. One module per command group; importing them
registers their commands on :data:`app`."""

from hdeval.cli import (  # noqa: F401  (registers commands)
    admin,
    evaluation,
    report,
    scoring,
    systems,
    training,
)
from hdeval.cli.app import app, run_cli

__all__ = ["app", "run_cli"]
