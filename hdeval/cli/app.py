"""The ``hdeval`` command: its sub-command groups, shared options, logging and error exit."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from hdeval.errors import ConfigError, HDEvalError

app = typer.Typer(help="Trainable, explainable LLM evaluation (HD-Eval).", no_args_is_help=True)
model_app = typer.Typer(help="The embedded default judge model.", no_args_is_help=True)
cache_app = typer.Typer(help="The persistent LLM result cache.", no_args_is_help=True)
data_app = typer.Typer(help="Label files: convert public rating sets.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(cache_app, name="cache")
app.add_typer(data_app, name="data")
console = Console(stderr=True)

ParamsOption = Annotated[
    Path | None,
    typer.Option(
        "--params",
        help="Params YAML (its 'llm' section picks the judge); default ./params.yaml if present.",
    ),
]


def _params_file(path: Path | None) -> Path | None:
    """The params file in use: the one named, else ./params.yaml if present, else None."""
    if path is not None:
        return path
    return Path("params.yaml") if Path("params.yaml").is_file() else None


#: Server URLs (comma-separated) that may receive the API key of a params.yaml not named.
TRUSTED_URLS = "HDEVAL_TRUSTED_URLS"


def _params(path: Path | None):
    """The params file named (which must exist), else ./params.yaml if present, else defaults.

    A ./params.yaml that was not named may not send an API key to a server the user did not
    choose (:func:`_check_key_destination`)."""
    from hdeval.params import Params, load_params

    found = _params_file(path)
    config = load_params(found) if found is not None else Params()
    if path is None and found is not None:
        _check_key_destination(found, config)
    return config


def _check_key_destination(found: Path, config) -> None:
    """Refuse a params file picked up from the working directory (it may be someone else's)
    whose server judge would be sent the API key of ``llm.api_key_env``, unless its URL is
    listed in ``HDEVAL_TRUSTED_URLS``: running hdeval in a directory you did not write must not
    send your key where you did not choose."""
    trusted = {u.strip().rstrip("/") for u in os.environ.get(TRUSTED_URLS, "").split(",")}
    for where, llm in (("llm", config.llm), ("hierarchy.decomposer", config.hierarchy.decomposer)):
        if llm is None or llm.backend != "openai" or not os.environ.get(llm.api_key_env):
            continue
        url = llm.base_url.rstrip("/")
        if url not in trusted:
            raise ConfigError(
                f"{found} was found in the working directory, not named with --params, and its "
                f"{where} section would send the API key in ${llm.api_key_env} to {url}; hdeval "
                f"sends a key only to a server you chose: pass --params {found}, or set "
                f"{TRUSTED_URLS}={url}"
            )


MaxCharsOption = Annotated[
    int | None,
    typer.Option(
        "--max-field-chars",
        min=1,
        help="Longest text field of a row in characters (default: data.max_field_chars).",
    ),
]


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )


def run_cli() -> None:
    """Entry point that turns hdeval's own errors into one clear line and exit code 2.

    Click's standalone mode keeps usage errors (exit 2) and ``typer.Exit`` codes intact.
    """
    try:
        app()
    except HDEvalError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)
