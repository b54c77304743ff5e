"""`hdeval score` and `hdeval train` against real judges that fail: a closed port, the real
llama.cpp server stopped mid-run, the real embedded judge killed mid-run, refusing every score,
or running in another precision than the bundle was trained in. Tiny: a few short texts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.code_deps import REPO
from tests.servers import MODEL_ALIAS, free_port, run_llama_server
from tests.test_bad_inputs import HDEVAL, TREE, make_bundle, refused

SOURCE = (
    "The city council met on Tuesday to discuss the new park. Residents asked for more trees, "
    "a playground and longer opening hours. The mayor promised a decision within a month, "
    "after the budget review. Work could start in spring if the plan is approved."
)


def write_texts(path: Path, n: int) -> list[str]:
    outputs = [f"The council discussed a new park; decision number {i} is due." for i in range(n)]
    rows = [
        {"id": f"t{i}", "doc_id": "d1", "source": SOURCE, "output": text}
        for i, text in enumerate(outputs)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [r["id"] for r in rows]


def start(args: list[str], cwd: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "HDEVAL_CACHE": str(cache)}
    return subprocess.Popen(
        [HDEVAL, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    stdout, stderr = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run(args: list[str], cwd: Path, cache: Path, timeout: float = 600):
    return finish(start(args, cwd, cache), timeout)


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for_rows(path: Path, process: subprocess.Popen, n: int = 1, timeout: float = 400):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if path.is_file() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {n} rows in {path} (exit {process.poll()})")


# ----------------------------------------------------------------------------- server judges
def server_params(path: Path, base_url: str, **extra) -> Path:
    llm = {"backend": "openai", "base_url": base_url, "model": MODEL_ALIAS, **extra}
    path.write_text(json.dumps({"llm": llm}))  # JSON is YAML
    return path


def server_identity(base_url: str) -> str:
    """The identity of a judge at ``base_url`` that reports nothing about its weights, as
    llama.cpp's server does (a dead one is named the same: it is never asked)."""
    return f"openai-compatible:{base_url.rstrip('/')}:{MODEL_ALIAS}"


def test_dead_judge_stops_score_at_once_without_leaking_credentials(tmp_path, monkeypatch):
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    make_bundle(tmp_path / "bundle", server_identity(base_url))
    write_texts(tmp_path / "in.jsonl", 3)
    monkeypatch.setenv("HDEVAL_DEAD_JUDGE_KEY", "s3cr3tpass")
    server_params(tmp_path / "p.yaml", base_url, api_key_env="HDEVAL_DEAD_JUDGE_KEY")
    began = time.monotonic()
    done = run(
        ["score", "in.jsonl", "--model", "bundle", "--params", "p.yaml", "--out", "out.jsonl"],
        tmp_path,
        tmp_path / "cache.sqlite",
    )
    assert time.monotonic() - began < 60
    refused(done, "127.0.0.1", "0 rows are in out.jsonl; run again with --resume")
    assert "s3cr3tpass" not in done.stderr + done.stdout
    assert not (tmp_path / "out.jsonl").exists()


def test_dead_judge_stops_train_before_tuning(tmp_path):
    labels, aspects = _tiny_labels(tmp_path)
    params = server_params(tmp_path / "p.yaml", f"http://127.0.0.1:{free_port()}/v1")
    config = json.loads(params.read_text())
    config.update(_tiny_train(labels, aspects))
    params.write_text(json.dumps(config))
    done = run(["train", "--params", "p.yaml"], tmp_path, tmp_path / "cache.sqlite", 120)
    refused(done, "127.0.0.1")
    assert "Pearson" not in done.stderr + done.stdout


@pytest.mark.server
def test_server_stopped_mid_run_keeps_the_finished_rows(tmp_path, embedded_gguf):
    """The real llama.cpp server dies after the first rows: exit 2 naming the server and the
    rows kept; every row written is complete and scored."""
    ids = write_texts(tmp_path / "in.jsonl", 40)
    cache = tmp_path / "cache.sqlite"
    with run_llama_server(embedded_gguf) as base_url:
        make_bundle(tmp_path / "bundle", server_identity(base_url))
        server_params(tmp_path / "p.yaml", base_url, max_retries=0, max_consecutive_failures=2)
        args = ["score", "in.jsonl", "--model", "bundle", "--params", "p.yaml"]
        process = start([*args, "--out", "out.jsonl"], tmp_path, cache)
        wait_for_rows(tmp_path / "out.jsonl", process, 2)
    done = finish(process, 120)
    kept = rows_of(tmp_path / "out.jsonl")
    message = refused(done, base_url, f"{len(kept)} rows are in out.jsonl", "--resume")
    assert "127.0.0.1" in message and 2 <= len(kept) < len(ids)
    assert [r["id"] for r in kept] == ids[: len(kept)]
    assert all(None not in r["scores"].values() for r in kept)


# ----------------------------------------------------------------------------- embedded judge
def embedded_identity(precision: str) -> str:
    """The embedded judge's identity in ``precision``, without loading it."""
    from hdeval.llm.local import embedded
    from hdeval.llm.local.precision import weights_fingerprint

    path = embedded.pull()
    return f"transformers:{path.name}:{weights_fingerprint(path)[:16]}:{precision}"


def auto_precision() -> str:
    """The precision of the default judge config here (``dtype`` and ``quantize`` auto)."""
    from hdeval.llm.local.precision import resolve_dtype, resolve_quantize

    quantize = resolve_quantize("auto", "auto", "cpu")
    suffix = "" if quantize == "none" else f"-{quantize}"
    return str(resolve_dtype("auto")).removeprefix("torch.") + suffix


@pytest.fixture(scope="module")
def embedded_project(tmp_path_factory, embedded_dir) -> Path:
    """A bundle trained (on synthetic features) for the embedded judge in its auto precision."""
    root = tmp_path_factory.mktemp("embedded")
    make_bundle(root / "bundle", embedded_identity(auto_precision()))
    return root


@pytest.mark.model
def test_killed_score_keeps_its_rows_and_resume_finishes(embedded_project, tmp_path):
    ids = write_texts(tmp_path / "in.jsonl", 4)
    cache, bundle = embedded_project / "cache.sqlite", str(embedded_project / "bundle")
    args = ["score", "in.jsonl", "--model", bundle, "--out", "out.jsonl"]
    process = start(args, tmp_path, cache)
    wait_for_rows(tmp_path / "out.jsonl", process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    text = (tmp_path / "out.jsonl").read_text()
    kept = rows_of(tmp_path / "out.jsonl")
    assert 1 <= len(kept) < len(ids) and text.endswith("\n")
    assert all(set(r["scores"]) == {"coherence", "fluency"} for r in kept)

    refused(run(args, tmp_path, cache), "already exists; pass --resume")
    done = run([*args, "--resume"], tmp_path, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(kept)} rows kept, 0 re-scored, {len(ids) - len(kept)} new" in done.stderr
    rows = rows_of(tmp_path / "out.jsonl")
    assert [r["id"] for r in rows] == ids
    assert rows[: len(kept)] == kept
    assert all(None not in r["scores"].values() and not r["failures"] for r in rows)


@pytest.mark.model
def test_resume_scores_again_with_the_judge_a_row_whose_text_was_edited(embedded_project, tmp_path):
    """Score two rows with the real judge, edit one row's output, resume: the other row is kept
    as it was, the edited one is scored again by the judge (its content hash is the new
    text's) and the summary says why."""
    write_texts(tmp_path / "in.jsonl", 2)
    cache, bundle = embedded_project / "cache.sqlite", str(embedded_project / "bundle")
    args = ["score", "in.jsonl", "--model", bundle, "--out", "out.jsonl"]
    assert run(args, tmp_path, cache).returncode == 0
    first = rows_of(tmp_path / "out.jsonl")
    edited = (tmp_path / "in.jsonl").read_text().replace("decision number 1 is due", "it rained")
    (tmp_path / "in.jsonl").write_text(edited)
    done = run([*args, "--resume"], tmp_path, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 rows kept, 1 re-scored (content changed), 0 new" in done.stderr
    again = rows_of(tmp_path / "out.jsonl")
    assert [r["id"] for r in again] == ["t0", "t1"] and again[0] == first[0]
    assert again[1]["content_sha256"] != first[1]["content_sha256"]
    assert again[1]["scores"] != first[1]["scores"]  # scored anew, from the new text
    assert None not in again[1]["scores"].values()


@pytest.mark.model
def test_invalid_unicode_replaced_scores_every_row_and_marks_it(embedded_project, tmp_path):
    """Row b was cut inside an emoji (a lone surrogate). With --invalid-unicode replace, rows
    a, b and c are all scored and b is marked; every row names the bundle and the judge."""
    rows = [
        {"id": i, "source": SOURCE, "output": text}
        for i, text in (("a", "A park."), ("b", "A park \ud83d cut."), ("c", "Trees."))
    ]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache, bundle = embedded_project / "cache.sqlite", embedded_project / "bundle"
    args = ["score", "in.jsonl", "--model", str(bundle), "--out", "out.jsonl"]
    done = run([*args, "--invalid-unicode", "replace"], tmp_path, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = rows_of(tmp_path / "out.jsonl")
    assert [r["id"] for r in scored] == ["a", "b", "c"]
    assert [r["unicode_replaced"] for r in scored] == [[], ["output"], []]
    assert all(None not in r["scores"].values() for r in scored)
    card = json.loads((bundle / "card.json").read_text())
    assert {r["judge"] for r in scored} == {embedded_identity(auto_precision())}
    assert {r["bundle"]["card_sha256"] for r in scored} == {card["card_sha256"]}


@pytest.mark.model
def test_unscored_texts_exit_1_unless_partial_output_is_allowed(embedded_project, tmp_path):
    """A judge that fails every score (no reply puts all its mass on the digits): the rows are
    written with null scores and their failures, exit 1; --allow-partial: exit 0."""
    write_texts(tmp_path / "in.jsonl", 1)
    (tmp_path / "p.yaml").write_text("llm:\n  min_digit_mass: 1.0\n")
    cache, bundle = embedded_project / "cache.sqlite", str(embedded_project / "bundle")
    args = ["score", "in.jsonl", "--model", bundle, "--params", "p.yaml"]
    done = run([*args, "--out", "a.jsonl"], tmp_path, cache)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "1 of 1 rows have no score" in done.stderr and "--allow-partial" in done.stderr
    (row,) = rows_of(tmp_path / "a.jsonl")
    assert row["scores"] == {"coherence": None, "fluency": None}
    assert len(row["failures"]) == len(TREE) and "min_digit_mass" in row["failures"][0]
    done = run([*args, "--out", "b.jsonl", "--allow-partial"], tmp_path, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows_of(tmp_path / "b.jsonl") == [row]


@pytest.mark.model
def test_precision_difference_warns_and_strict_matching_refuses(embedded_project, tmp_path):
    """The bundle was trained with the judge in its auto precision; the judge now runs in the
    other one (bfloat16 works on any CPU, slowly): a warning and scores, or with strict
    matching a refusal."""
    other = "float32" if auto_precision() == "bfloat16" else "bfloat16"
    write_texts(tmp_path / "in.jsonl", 1)
    (tmp_path / "p.yaml").write_text(f"llm:\n  dtype: {other}\n")
    cache, bundle = embedded_project / "cache.sqlite", str(embedded_project / "bundle")
    args = ["score", "in.jsonl", "--model", bundle, "--params", "p.yaml"]
    done = run([*args, "--strict-precision", "--out", "strict.jsonl"], tmp_path, cache)
    refused(done, f"trained with the judge in {auto_precision()}", f"runs in {other}", "strict")
    assert not (tmp_path / "strict.jsonl").exists()
    done = run([*args, "--out", "out.jsonl"], tmp_path, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"runs in {other}" in " ".join(done.stderr.split())
    (row,) = rows_of(tmp_path / "out.jsonl")
    assert None not in row["scores"].values()
    assert row["judge"] == embedded_identity(other)
    # resuming that file with the judge in the bundle's own precision would mix two judges
    written = (tmp_path / "out.jsonl").read_text()
    write_texts(tmp_path / "in.jsonl", 2)
    resume = ["score", "in.jsonl", "--model", bundle, "--out", "out.jsonl", "--resume"]
    refused(
        run(resume, tmp_path, cache),
        f"scored by the judge '{embedded_identity(other)}'",
        f"this run's judge is '{embedded_identity(auto_precision())}'",
        "not resuming",
    )
    assert (tmp_path / "out.jsonl").read_text() == written


def _tiny_labels(root: Path) -> tuple[Path, list[str]]:
    rows = [
        {"id": f"{d}{s}", "doc_id": d, "source": f"Story {d}: a cat sat on a mat all day.",
         "output": f"A cat sat{'.' if s == 'x' else ' on a mat.'}", "scores": {"coherence": 3}}
        for d in "abcd" for s in "xy"
    ]  # fmt: skip
    path = root / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, ["coherence"]


def _tiny_train(labels: Path, aspects: list[str]) -> dict:
    """Params of a one-layer run on ``labels``, in a project directory (``hdeval train`` runs
    dvc.yaml's stages)."""
    for name in ("dvc.yaml", "pipelines"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, labels.parent / name)
    TREE.to_yaml(labels.parent / "aspects.yaml")
    data = {"path": str(labels), "criteria": "aspects.yaml", "aspects": aspects, "n_docs": None}
    hierarchy = {"layers": 1, "modes": ["prompt"], "cv_folds": 2}
    evaluate = {"folds": 2}  # four documents: two outer folds of two
    return {"data": {**data, "test_fraction": 0.25}, "hierarchy": hierarchy, "evaluate": evaluate}


@pytest.mark.model
def test_train_refuses_features_the_judge_failed_on(tmp_path, embedded_dir):
    labels, aspects = _tiny_labels(tmp_path)
    config = {**_tiny_train(labels, aspects), "llm": {"min_digit_mass": 1.0}}
    (tmp_path / "p.yaml").write_text(json.dumps(config))
    done = run(["train", "--params", "p.yaml"], tmp_path, tmp_path / "cache.sqlite")
    refused(done, "hierarchy.max_failed_share=0.2", "prompt:coherence (100%)")
    assert "Pearson" not in done.stderr + done.stdout
    assert not (tmp_path / "models").exists()
