"""Bad inputs through the real CLI, in a real process: refused with one line and exit 2, before
the judge loads, and nothing already written is lost.

The judge of these commands is a local model path that does not exist: a check that ran after
the judge would fail with "llm.model_path ... does not exist" instead of its own message.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hdeval.cli.score_output import content_sha256, params_sha256
from hdeval.errors import HDEvalError
from hdeval.export.bundle import card_sha256, export_bundle
from hdeval.params import TaskSpec, load_params
from hdeval.scoring.columns import check_failed_shares, feature_columns
from hdeval.scoring.run import Sample
from hdeval.training.aggregators import make_aggregator
from hdeval.tree.criteria import CriteriaTree, Criterion

HDEVAL = str(Path(sys.executable).parent / "hdeval")
ASPECTS = ["coherence", "fluency"]
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "well organized"),
        Criterion("fluency", "fluency", "grammatical"),
    ]
)
NO_JUDGE = "llm:\n  backend: transformers\n  model_path: /nonexistent/judge\n"


def run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "HDEVAL_CACHE": str(cwd / "cache.sqlite")}
    return subprocess.run(
        [HDEVAL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def refused(done: subprocess.CompletedProcess, *parts: str) -> str:
    """The error of a refused command (one line; a label file's list of problems follows it),
    checked to name ``parts``."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr[-2000:]
    message = done.stderr[done.stderr.index("error:") :]
    assert "model_path" not in message, f"the judge was opened first: {message}"
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    return message


def make_bundle(
    path: Path,
    identity: str = "transformers:judge:0123456789abcdef:float32",
    intervals: dict | None = None,
) -> Path:
    names = feature_columns([c.id for c in TREE], ["prompt"])
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 5, (40, len(names)))
    Y = np.c_[X[:, 0], X[:, 1] + 0.1 * X[:, 0]]
    return export_bundle(
        path,
        make_aggregator("linear").fit(X, Y),
        TREE,
        names,
        ASPECTS,
        llm_identity=identity,
        task=TaskSpec(),
        modes=["prompt"],
        unconditioned=False,
        training_data="synthetic",
        sample=X,
        intervals=intervals,
    )


def texts(path: Path, n: int = 2) -> Path:
    rows = [
        {"id": f"t{i}", "doc_id": "d1", "source": "A cat sat on a mat.", "output": f"Cat {i}."}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def project(tmp_path) -> Path:
    make_bundle(tmp_path / "bundle")
    texts(tmp_path / "in.jsonl")
    (tmp_path / "params.yaml").write_text(NO_JUDGE)
    return tmp_path


def _edit_card(bundle: Path, edit, rehash: bool = False) -> None:
    card = json.loads((bundle / "card.json").read_text())
    edit(card)
    if rehash:
        card["card_sha256"] = card_sha256(card)
    (bundle / "card.json").write_text(json.dumps(card, indent=2))


def _swap(card: dict) -> None:
    card["aspects"] = card["aspects"][::-1]


def _rename(card: dict) -> None:
    card["aspects"][0] = "relevance"


def _task(card: dict) -> None:
    card["task"]["description"] = "poetry"


def _delete(card: dict) -> None:
    del card["modes"]


def _precision(card: dict) -> None:
    card["llm_precision"] = "bfloat16"


def _old_column(card: dict) -> None:
    card["feature_names"][-1] = "len:_text"  # length in tokens, before it counted words


@pytest.mark.parametrize("edit", [_swap, _rename, _task, _delete, _precision])
def test_edited_card_is_refused_before_the_judge(project, edit):
    _edit_card(project / "bundle", edit)
    done = run(["score", "in.jsonl", "--model", "bundle", "--out", "out.jsonl"], project)
    refused(done, "card.json was edited after export", "retrain")
    assert not (project / "out.jsonl").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_swap, "the card's aspects ['fluency', 'coherence'] are not the aggregator's"),
        (_rename, "the card's aspects ['relevance', 'fluency'] are not the aggregator's"),
        (_delete, "modes: Field required"),
        (_old_column, "reads feature columns this hdeval does not compute (['len:_text']"),
    ],
)
def test_edited_card_with_its_hash_recomputed_is_still_refused(project, edit, message):
    """Aspect names are checked against the ones stored in the ONNX file; fields by schema."""
    _edit_card(project / "bundle", edit, rehash=True)
    done = run(["score", "in.jsonl", "--model", "bundle", "--out", "out.jsonl"], project)
    refused(done, message)


def test_compare_and_dhp_check_the_bundle_before_the_judge(project):
    _edit_card(project / "bundle", _swap)
    labels = project / "labels.jsonl"
    row = {"id": "a", "doc_id": "d", "source": "S.", "output": "O.", "references": ["R."]}
    row["scores"] = {"coherence": 3, "fluency": 4}
    labels.write_text(json.dumps(row) + "\n")
    (project / "aspects.yaml").write_text("")
    TREE.to_yaml(project / "aspects.yaml")
    common = ["--model", "bundle", "--criteria", "aspects.yaml"]
    refused(run(["compare", "labels.jsonl", *common], project), "card.json was edited")
    refused(run(["dhp", "labels.jsonl", "--out", "d", *common], project), "card.json was edited")


def test_score_out_checked_before_scoring(project):
    source = (project / "in.jsonl").read_text()
    args = ["score", "in.jsonl", "--model", "bundle", "--out"]
    refused(run([*args, "missing/out.jsonl"], project), "directory missing does not exist")
    refused(run([*args, "in.jsonl"], project), "is an input of this command")
    refused(run([*args, "bundle/card.json"], project), "is an input of this command")
    refused(run([*args, "params.yaml"], project), "is an input of this command")
    assert (project / "in.jsonl").read_text() == source
    (project / "old.jsonl").write_text('{"id": "t0"}\n')
    refused(run([*args, "old.jsonl"], project), "already exists; pass --resume")
    assert (project / "old.jsonl").read_text() == '{"id": "t0"}\n'
    other = '{"id": "elsewhere", "scores": {"coherence": 1.0}}\n'
    (project / "other.jsonl").write_text(other)
    refused(run([*args, "other.jsonl", "--resume"], project), "not among the inputs")
    assert (project / "other.jsonl").read_text() == other


def scored(
    project: Path, row_id: str, scores: dict, bundle: str = "bundle", explain: bool = False
) -> dict:
    """A row of ``hdeval score`` output, as ``bundle`` (a directory in ``project``) wrote it,
    with the hashes of its text in ``in.jsonl`` and of the params of a run with ``explain``."""
    card = json.loads((project / bundle / "card.json").read_text())
    origin = {"path": bundle, "card_sha256": card["card_sha256"]}
    rows = [json.loads(line) for line in (project / "in.jsonl").read_text().splitlines()]
    (text,) = (Sample(r["id"], r["doc_id"], r["source"], r["output"]) for r in rows
               if r["id"] == row_id)  # fmt: skip
    hashes = {
        "content_sha256": content_sha256(text),
        "params_sha256": params_sha256(load_params(project / "params.yaml").llm, "refuse", explain),
    }
    row = {"id": row_id, "scores": scores, "criteria": {}, "bundle": origin, "judge": "j"}
    return {**row, **hashes}


def test_resume_refuses_a_file_another_bundle_wrote(project):
    """Resuming with another bundle would mix two evaluators' scores in one file: refused,
    naming both bundles, before the judge is opened, and the file is left as it is."""
    make_bundle(project / "old", identity="transformers:old-judge:0123456789abcdef:float32")
    theirs = json.dumps(scored(project, "t0", {"coherence": 3.0, "fluency": 4.0}, "old")) + "\n"
    (project / "out.jsonl").write_text(theirs)
    args = ["score", "in.jsonl", "--model", "bundle", "--out", "out.jsonl", "--resume"]
    ours = json.loads((project / "bundle" / "card.json").read_text())["card_sha256"]
    old = json.loads(theirs)["bundle"]["card_sha256"]
    refused(
        run(args, project),
        f"line 1 was scored by the bundle old (card sha256 {old[:12]})",
        f"this run scores with bundle (card sha256 {ours[:12]})",
        "not resuming",
    )
    assert (project / "out.jsonl").read_text() == theirs
    unnamed = '{"id": "t0", "scores": {"coherence": 3.0, "fluency": 4.0}}\n'
    (project / "out.jsonl").write_text(unnamed)
    refused(run(args, project), "line 1 was scored by the bundle an unnamed bundle")
    assert (project / "out.jsonl").read_text() == unnamed


def test_resume_of_a_finished_file_loads_no_judge(project):
    """Every row already scored: nothing to do, and the (missing) judge is never opened."""
    rows = [scored(project, f"t{i}", {"coherence": 3.0, "fluency": 4.0}) for i in range(2)]
    done_rows = "".join(json.dumps(row) + "\n" for row in rows)
    (project / "out.jsonl").write_text(done_rows + '{"id": "t')  # cut off by a kill
    done = run(
        ["score", "in.jsonl", "--model", "bundle", "--out", "out.jsonl", "--resume"], project
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (project / "out.jsonl").read_text() == done_rows


def test_resume_scores_again_a_row_left_without_a_score(project):
    """A row with a null score is queued again, and dropped from the file once the judge is
    open. Here the judge cannot be opened: the file is left as it was."""
    row = scored(project, "t0", {"coherence": 3.0, "fluency": 4.0})
    failed = {**row, "id": "t1", "scores": {"coherence": None, "fluency": None}}
    written = json.dumps(row) + "\n" + json.dumps(failed) + "\n"
    (project / "out.jsonl").write_text(written)
    done = run(
        ["score", "in.jsonl", "--model", "bundle", "--out", "out.jsonl", "--resume"], project
    )
    assert done.returncode == 2 and "model_path" in done.stderr, done.stderr[-2000:]
    assert "1 rows kept, 1 re-scored (left without a score), 0 new" in done.stderr
    assert (project / "out.jsonl").read_text() == written


def test_resume_scores_again_a_row_whose_text_or_params_changed(project):
    """A kept row must be of the same text (id, source, output...) and the same score-changing
    params as this run's: another is queued again, and the summary says why."""
    rows = [scored(project, f"t{i}", {"coherence": 3.0, "fluency": 4.0}) for i in range(2)]
    (project / "out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    texts(project / "in.jsonl", n=3)
    edited = (project / "in.jsonl").read_text().replace("Cat 1.", "Dog 1.")
    (project / "in.jsonl").write_text(edited)
    args = ["score", "in.jsonl", "--model", "bundle", "--out", "out.jsonl", "--resume"]
    done = run(args, project)
    assert done.returncode == 2 and "model_path" in done.stderr, done.stderr[-2000:]
    assert "1 rows kept, 1 re-scored (content changed), 1 new" in done.stderr
    texts(project / "in.jsonl", n=3)
    done = run([*args, "--explain"], project)
    assert "0 rows kept, 2 re-scored (params changed), 1 new" in done.stderr
    for edit in ("max_context: 512", "min_digit_mass: 0.6"):
        (project / "params.yaml").write_text(NO_JUDGE + f"  {edit}\n")
        done = run(args, project)
        assert "0 rows kept, 2 re-scored (params changed), 1 new" in done.stderr, edit
    (project / "params.yaml").write_text(NO_JUDGE)
    old = {k: v for k, v in rows[0].items() if not k.endswith("_sha256")}
    (project / "out.jsonl").write_text(json.dumps(old) + "\n")
    done = run(args, project)
    assert "0 rows kept, 1 re-scored (no content hash), 2 new" in done.stderr


def test_missing_params_file_and_bad_params_values(project):
    args = ["score", "in.jsonl", "--model", "bundle"]
    refused(run([*args, "--params", "typo.yaml"], project), "cannot read typo.yaml")
    (project / "bad.yaml").write_text("aggregator:\n  kind: banana\n")
    refused(run(["train", "--params", "bad.yaml"], project), "aggregator.kind")
    (project / "bad.yaml").write_text("hierarchy:\n  proxy_aggregator: banana\n")
    refused(run(["train", "--params", "bad.yaml"], project), "hierarchy.proxy_aggregator")


def test_train_checks_labels_and_n_docs_before_the_judge(project):
    labels = project / "labels.jsonl"
    rows = [
        {"id": f"{d}{s}", "doc_id": d, "source": "S.", "output": f"O {s}.",
         "scores": {"coherence": 3, "fluency": 4}}
        for d in "ab" for s in "xy"
    ]  # fmt: skip
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    TREE.to_yaml(project / "aspects.yaml")
    data = (
        "data:\n  path: labels.jsonl\n  criteria: aspects.yaml\n  aspects: [coherence, fluency]\n"
    )
    (project / "p.yaml").write_text(NO_JUDGE + data + "  n_docs: 5\n")
    refused(
        run(["train", "--params", "p.yaml"], project),
        "data.n_docs in p.yaml",
        "labels.jsonl",
        "5 documents asked for, the labels hold 2",
    )
    rows[1]["scores"]["fluency"] = 7
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (project / "p.yaml").write_text(NO_JUDGE + data + "  n_docs: 2\n")
    refused(run(["train", "--params", "p.yaml"], project), "line 2", "outside the allowed range")
    (project / "p.yaml").write_text(NO_JUDGE + data.replace("labels", "nothere") + "  n_docs: 2\n")
    refused(run(["train", "--params", "p.yaml"], project), "nothere.jsonl", "cannot read")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[" * 200_000 + "]" * 200_000, "line 2: JSON nested too deeply to read"),
        ('{"id": ' + "7" * 5000 + "}", "line 2: unreadable JSON value: Exceeds the limit"),
        (
            json.dumps({"id": "big", "doc_id": "d", "source": "S.", "output": "x" * 2000}),
            "line 2 (id 'big'): field 'output': 2,000 characters, more than the limit of 1,000",
        ),
    ],
)
def test_hostile_rows_are_named_not_crashes(project, line, message):
    path = texts(project / "bad.jsonl", 1)
    path.write_text(path.read_text() + line + "\n")
    args = ["score", "bad.jsonl", "--model", "bundle", "--max-field-chars", "1000"]
    refused(run(args, project), message)


def test_a_50_mb_row_is_refused_in_bounded_memory(project):
    """A 50 MB text field: an error naming the row, and the process stays well under 1 GB."""
    path = project / "huge.jsonl"
    with open(path, "w") as handle:
        handle.write('{"id": "huge", "doc_id": "d", "source": "S.", "output": "')
        for _ in range(50):
            handle.write("word " * 200_000)
        handle.write('"}\n')
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = run(["score", "huge.jsonl", "--model", "bundle"], project)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    refused(done, "line 1 (id 'huge'): field 'output': 50,000,000 characters")
    assert peak_mib < 600 or before / 1024 >= 600, f"peak {peak_mib:.0f} MiB"


def test_bundle_files_are_all_world_readable(project):
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (project / "bundle").iterdir()}
    umask = os.umask(0o022)
    os.umask(umask)
    assert modes["aggregator.onnx"] == modes["card.json"] == 0o666 & ~umask, modes


def test_tuning_refused_on_features_with_too_many_failed_scores():
    import pandas as pd

    features = pd.DataFrame(
        {"prompt:a": [1.0, 2.0, np.nan, 4.0], "prompt:b": [np.nan, np.nan, 3.0, 1.0]}
    )
    check_failed_shares(features, 0.5)
    with pytest.raises(HDEvalError, match=r"share=0.3 .* for prompt:b \(50%\);"):
        check_failed_shares(features, 0.3)


def test_a_bundle_trained_with_references_refuses_a_row_without_them(tmp_path):
    """The references family reads every text's reference: a row without one is named before
    the judge is opened. The card keeps how the likelihoods were read (``end_of_text``)."""
    from hdeval.export.evaluator import profile_of
    from hdeval.scoring.columns import Profile

    profile = Profile(("mean",), False, False, ("references",), end_of_text=True)
    names = feature_columns([c.id for c in TREE], ["prompt"], True, profile)
    X = np.random.default_rng(0).uniform(1, 5, (40, len(names)))
    export_bundle(
        tmp_path / "bundle", make_aggregator("linear").fit(X, X[:, :2]), TREE, names, ASPECTS,
        llm_identity="transformers:judge:0123456789abcdef:float32", task=TaskSpec(),
        modes=["prompt"], unconditioned=True, profile=profile, training_data="synthetic", sample=X,
    )  # fmt: skip
    card = json.loads((tmp_path / "bundle" / "card.json").read_text())
    assert card["families"] == ["references"] and profile_of(card) == profile
    rows = [{"id": "with", "source": "S.", "output": "O.", "references": ["R."]},
            {"id": "without", "source": "S.", "output": "O."}]  # fmt: skip
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "params.yaml").write_text(NO_JUDGE)
    done = run(["score", "in.jsonl", "--model", "bundle"], tmp_path)
    refused(done, "row 'without' has no references", "references family")


def test_invalid_unicode_is_refused_before_any_judge_call(project):
    """Row b's text was cut inside an emoji (a lone surrogate): refused when the file is read,
    naming the row and the field, before the judge is opened: rows a and c are not scored
    and b does not stop a run half-way. The same for the labels ``train`` reads."""
    rows = [
        {"id": i, "source": "A cat sat on a mat.", "output": text}
        for i, text in (("a", "Cat."), ("b", "Emoji cut \ud83d here."), ("c", "Mat."))
    ]
    (project / "cut.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["score", "cut.jsonl", "--model", "bundle", "--out", "out.jsonl"]
    refused(
        run(args, project),
        "line 2 (id 'b'): field 'output': invalid Unicode: lone surrogate U+D83D at character 10",
        "--invalid-unicode replace",
    )
    assert not (project / "out.jsonl").exists()
    labels = [{**r, "doc_id": r["id"], "scores": {"coherence": 3, "fluency": 4}} for r in rows]
    (project / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    TREE.to_yaml(project / "aspects.yaml")
    data = (
        "data:\n  path: labels.jsonl\n  criteria: aspects.yaml\n  aspects: [coherence, fluency]\n"
    )
    (project / "p.yaml").write_text(NO_JUDGE + data + "  n_docs: 2\n")
    refused(run(["train", "--params", "p.yaml"], project), "line 2 (id 'b'): field 'output'")
