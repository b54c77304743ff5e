"""``hdeval features``, ``hdeval train`` and ``hdeval estimate``: scoring criteria, running the
pipeline without DVC, and what a run will cost."""

from __future__ import annotations

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
    from hdeval.cli.score_output import check_out_path
    from hdeval.data import load_labels, subsample_documents
    from hdeval.llm.judge import open_judge
    from hdeval.scoring.columns import Profile
    from hdeval.scoring.criterion_scorer import CriterionScorer
    from hdeval.tree.criteria import CriteriaTree

    if mode not in ("prompt", "likelihood", "both"):
        raise typer.BadParameter(f"{mode!r} is not prompt, likelihood or both", param_hint="--mode")
    config = _params(params)
    check_out_path(out, [data, criteria, _params_file(params)])
    limit = max_field_chars or config.data.max_field_chars
    labels = load_labels(
        data, aspects.split(","), config.data.score_range, limit, config.data.invalid_unicode
    )
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
    gates: Annotated[
        bool,
        typer.Option(
            "--gates/--no-gates",
            help="Run the baselines, DHP, the acceptance gates and the report after evaluate.",
        ),
    ] = True,
) -> None:
    """Run the pipeline of dvc.yaml in this project directory without DVC: every stage in
    dvc.yaml's order, writing what `dvc repro` writes (work/, models/evaluator, metrics.json,
    results.md, plots/). Answers already in the cache cost no LLM call."""
    import pandas as pd

    from hdeval.data.splitting import load_split
    from hdeval.pipeline.runner import run_stages
    from hdeval.training.crossfit import outer_folds
    from hdeval.tree.criteria import aspects_tree

    config = _params(params)
    # Everything a user can get wrong is checked before the judge loads or is called.
    train_rows, test_rows = load_split(
        config.data, str(_params_file(params) or "the default params")
    )
    documents = pd.concat([train_rows.samples, test_rows.samples])["doc_id"].to_numpy()
    outer_folds(documents, config.evaluate.folds, config.hierarchy.seed)
    aspects_tree(config.data)
    until = None if gates else "explain"
    run_stages(Path.cwd(), params, until, config.hierarchy.layers, announce=console.print)


@app.command("estimate")
def estimate_command(
    params: ParamsOption = None,
    calibrate: Annotated[
        bool,
        typer.Option(
            help="Time the first pieces of work still to do on the judge (their results are "
            "cached, so the run does not repeat them)."
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """LLM calls, prompt tokens and time per LLM stage that `dvc repro` here would run, after
    the cache: the expected case, and the most it can cost where the tree's growth decides."""
    import json

    from hdeval.llm.judge import open_decomposer, open_judge
    from hdeval.pipeline import calibration, estimate, estimate_table, project_state

    config = _params(params)
    root, used = Path.cwd(), _params_file(params)
    if used is not None and used.resolve() == (root / "params.yaml").resolve():
        settled = project_state.labels_settled(root, config.data.input_files())
        state = project_state.dvc_state(root, settled)
    else:
        why = "" if used is None else f"{used}, not this project's params.yaml"
        state = project_state.every_stage(
            root, f"params from {why or 'the defaults'}: every stage counted as run"
        )
    judge = open_judge(config.llm)
    decomposer = open_decomposer(config.hierarchy.decomposer, config.llm, judge) or judge
    found = estimate.estimate(config, judge, decomposer, state)
    rates = calibration.calibrate(judge, found.probes) if calibrate else None
    data = estimate_table.figures(found, rates, state)
    typer.echo(
        json.dumps(data, indent=2) if as_json else estimate_table.render(data, judge.identity)
    )
