"""``hdeval features``, ``hdeval train`` and ``hdeval estimate``: scoring criteria, training an
evaluator without DVC, and what a run will cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hdeval.cli.app import (
    MaxCharsOption,
    ParamsOption,
    _params,
    _params_file,
    app,
    console,
)
from hdeval.errors import ConfigError


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
    from hdeval.columns import Profile
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
    profile = Profile.of(config.hierarchy)
    scorer = CriterionScorer(open_judge(config.llm), config.task, modes, profile=profile)
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
