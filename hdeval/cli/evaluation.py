"""``hdeval compare`` and ``hdeval dhp``: HD-Eval against the baselines, and the DHP
benchmark, outside the pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hdeval.cli.app import (
    MaxCharsOption,
    ParamsOption,
    _params,
    _params_file,
    app,
    console,
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


def _reads_references(scorers) -> bool:
    """Whether one of ``scorers`` is a bundle that reads the references."""
    from hdeval.baselines.registry import BundleScorer

    return any(s.evaluator.reads_references for s in scorers if isinstance(s, BundleScorer))


def _text_scorers(names, model, criteria, aspects, params, data, max_chars):
    """The named TextScorers on one cached judge, the labels they are judged on, the judge and
    the params. The bundle, the criteria and the labels are checked before the judge loads."""
    from hdeval.baselines.registry import HDEVAL, make_scorers
    from hdeval.data import load_labels
    from hdeval.export.evaluator import Evaluator, open_bundle
    from hdeval.llm.judge import open_judge
    from hdeval.params import TaskSpec
    from hdeval.tree.criteria import CriteriaTree

    config = _params(params)
    tree = CriteriaTree.from_yaml(criteria)
    bundle = open_bundle(model) if model else None
    chosen = aspects.split(",") if aspects else None
    if chosen is None:
        chosen = bundle.card["aspects"] if bundle else [c.id for c in tree.layer(1)]
    limit = max_chars or config.data.max_field_chars
    labels = load_labels(data, chosen, config.data.score_range, limit, config.data.invalid_unicode)
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
    from hdeval.cli.score_output import check_out_path

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
        from hdeval.dhp.runner import dhp_markdown, dhp_samples, run_suite, summary
        from hdeval.params import DHPParams

        settings = DHPParams(n_texts=dhp_texts)
        samples = dhp_samples(labels, settings, _reads_references(scorers))
        results = run_suite(scorers, samples, settings, None, dhp)
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
    data: Annotated[
        Path,
        typer.Argument(
            help="Labelled rows with references (JSONL or CSV); for a bundle that reads the "
            "references, its best-rated text of each document is perturbed beside them."
        ),
    ],
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
    from hdeval.acceptance import dhp_verdict, enforce
    from hdeval.cli.score_output import check_out_path
    from hdeval.dhp.runner import dhp_samples, run_suite, summary
    from hdeval.dhp.text import TASKS
    from hdeval.errors import AcceptanceError
    from hdeval.params import AcceptanceParams, DHPParams

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
    samples = dhp_samples(labels, settings, _reads_references(scorers))
    results = run_suite(scorers, samples, settings, perturber, out)
    figures = summary(results)
    (out / "summary.json").write_text(json.dumps(figures, indent=2) + "\n")
    _print_dhp(figures)
    try:
        first = results[scorers[0].name]
        verdict = dhp_verdict(first.scorer, first.D_min_ew, first.table, gates)
        console.print(enforce([verdict], gates.on_failure)[0])
    except AcceptanceError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
