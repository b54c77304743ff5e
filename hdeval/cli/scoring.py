"""``hdeval score``: score texts with a trained evaluator, row by row, with explanations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from hdeval.cli.app import (
    MaxCharsOption,
    ParamsOption,
    _params,
    _params_file,
    app,
    console,
)


@app.command("score")
def score(
    inputs: Annotated[
        Path,
        typer.Argument(
            help="JSONL/CSV rows with id, source, output (doc_id, references optional)."
        ),
    ],
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
    invalid_unicode: Annotated[
        Literal["refuse", "replace"] | None,
        typer.Option(
            "--invalid-unicode",
            help="Text with invalid Unicode (a lone surrogate: an emoji cut in half): refuse "
            "the file naming the row, or replace it with U+FFFD and mark the row "
            "(default: data.invalid_unicode).",
        ),
    ] = None,
) -> None:
    """Score texts with a trained evaluator: per-aspect scores (with their prediction intervals
    where the bundle has them) and per-criterion scores per row.

    Rows are written as they are scored. Exit 1 when a text got no score (unless
    --allow-partial); exit 2 for bad inputs, a bad bundle or an unreachable judge.
    """
    from tqdm.auto import tqdm

    from hdeval.cli.score_output import (
        ScoreWriter,
        bundle_record,
        check_out_path,
        content_sha256,
        params_sha256,
    )
    from hdeval.data import load_texts
    from hdeval.errors import JudgeUnavailableError
    from hdeval.export.evaluator import Evaluator, check_references, open_bundle
    from hdeval.llm.judge import open_judge
    from hdeval.scoring.run import samples_of

    # Everything a user can get wrong is checked before the judge loads or is called.
    config = _params(params)
    mode = invalid_unicode or config.data.invalid_unicode
    texts = load_texts(inputs, max_field_chars or config.data.max_field_chars, mode)
    samples = samples_of(texts.samples)
    bundle = open_bundle(model)
    check_references(bundle.path, bundle.card, samples)
    if out is not None:
        check_out_path(out, [inputs, model, _params_file(params)])
    writer = ScoreWriter(
        out,
        {s.id: content_sha256(s) for s in samples},
        bundle_record(model, bundle.card),
        resume,
        params_sha256(config.llm, mode, explain),
    )
    todo = [s for s in samples if s.id not in writer.done]
    if writer.resuming:
        console.print(f"resuming {out}: {writer.summary(len(todo))}", soft_wrap=True)
    strict = strict_precision or config.llm.strict_precision
    unscored, truncated = 0, 0
    try:
        if todo:
            evaluator = Evaluator.load(bundle, open_judge(config.llm), strict_precision=strict)
        writer.begin(evaluator.scorer.judge.identity if todo else None)
        origin = {"bundle": writer.bundle, "judge": writer.judge}
        where = _where(texts.samples)
        with tqdm(total=len(todo), desc="scoring", unit="text") as bar:
            for sample in todo:  # each row is on disk as soon as it is scored
                rows = _score_rows(evaluator, [sample], explain, texts.replaced, origin, where)
                writer.write([{**row, **writer.hashes(row["id"])} for row in rows])
                unscored += sum(None in row["scores"].values() for row in rows)
                truncated += sum(row["truncated"] for row in rows)
                bar.update(len(rows))
    except JudgeUnavailableError as exc:
        kept = f"{len(writer.done) + writer.written} rows are in {out}" if out else ""
        again = "; run again with --resume to score the rest" if out else ""
        raise JudgeUnavailableError(f"{exc}. {kept}{again}") from exc
    finally:
        writer.close()
    if todo:
        cost = evaluator.scorer.judge.cost()
        console.print(
            f"{len(todo)} texts scored: {cost['llm_calls']} judge calls, "
            f"{cost['cache_hits']} answers from the cache"
        )
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


def _where(samples) -> dict[str, dict[str, str]]:
    """Each input row's ``doc_id`` and, where given, ``system_id``, by id: what
    ``hdeval compare-systems`` groups the scored rows by."""
    where = {}
    for row_id, doc_id, system_id in zip(
        samples.index, samples["doc_id"], samples["system_id"], strict=True
    ):
        where[str(row_id)] = {"doc_id": doc_id, **({"system_id": system_id} if system_id else {})}
    return where


def _score_rows(
    evaluator, samples: list, explain: bool, replaced: dict, origin: dict, where: dict
) -> list[dict]:
    """The output rows of ``samples``: their document and system (``where``), scores, their
    prediction intervals where the bundle has them, criterion scores, failures, truncation, the
    fields whose invalid Unicode was replaced when the texts were read (``replaced``), and the
    bundle and judge that scored them (``origin``)."""
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
            **where.get(sample_id, {}),
            "scores": values["aspects"],
            **_intervals(values, result.interval_level, result.system_sd),
            "criteria": values["criteria"],
            "failures": failures.get(sample_id, []),
            "truncated": sample_id in truncated,
            "unicode_replaced": replaced.get(sample_id, []),
            **origin,
        }
        if explain:
            row["explanation"] = _with_intervals(explanations.get(sample_id), values)
        rows.append(row)
    return rows


def _intervals(values: dict, level: float | None, system_sd: dict | None) -> dict:
    """A row's ``interval_level``, per-aspect ``intervals`` and ``system_error_sd`` (the
    bundle's error of a system's mean, which ``hdeval compare-systems`` adds to its CIs);
    nothing for a bundle without intervals."""
    if "intervals" not in values:
        return {}
    return {"interval_level": level, "intervals": values["intervals"], "system_error_sd": system_sd}


def _with_intervals(explanation: dict | None, values: dict) -> dict | None:
    """``explanation`` with each aspect's prediction interval beside its score."""
    if explanation is None or "intervals" not in values:
        return explanation
    aspects = {
        aspect: {**part, "interval": values["intervals"].get(aspect)}
        for aspect, part in explanation["aspects"].items()
    }
    return {**explanation, "aspects": aspects}
