"""A copy of the pipeline in a temporary directory, driven by the real ``dvc``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DVC = str(Path(sys.executable).parent / "dvc")


def run(args: list[str], cwd: Path, env: dict, ok: bool = True) -> str:
    """Run a command in the project; with ``ok``, fail the test on a non-zero exit."""
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if ok:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def first_source_words(row: dict, words: int) -> dict:
    """``row`` with its source cut to the first ``words`` words (an article is most of a
    prompt's tokens: a test that needs no whole article runs several times faster on a slow
    CPU)."""
    return {**row, "source": " ".join(row["source"].split()[:words])}


def development_rows() -> list[dict]:
    """Every SummEval row of the development documents: the others are never scored."""
    from hdeval.data.summeval import development_rows as rows

    return rows(REPO)


def summeval_rows(
    n: int = 64, systems: set[str] | None = None, source_words: int | None = None
) -> list[dict]:
    """The first ``n`` SummEval label rows of the development documents, optionally of some
    systems only, and with each source cut to its first ``source_words`` words
    (:func:`first_source_words`)."""
    rows = development_rows()[:n]
    if source_words is not None:
        rows = [first_source_words(r, source_words) for r in rows]
    return [r for r in rows if systems is None or r["system_id"] in systems]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_project(
    root: Path,
    rows: list[dict],
    params_update: dict,
    aspect: str = "coherence",
    preset: Path = REPO / "params.yaml",
) -> tuple[dict, dict]:
    """dvc.yaml, hdeval/ and a one-aspect params file in ``root``: ``preset``
    (the SummEval defaults, or a domain's preset) judged on ``aspect`` only.

    ``params_update`` maps a params section to the keys it changes. Returns (env, params).
    """
    for name in ("dvc.yaml", ".dvcignore", "hdeval"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    write_jsonl(root / "labels.jsonl", rows)
    params = yaml.safe_load(preset.read_text())
    tree = yaml.safe_load((REPO / params["data"]["criteria"]).read_text())
    tree["criteria"] = [c for c in tree["criteria"] if c["id"] == aspect]
    (root / "aspects.yaml").write_text(yaml.safe_dump(tree))
    params["data"].update(
        path="labels.jsonl", criteria="aspects.yaml", aspects=[aspect], n_docs=None,
        documents=None,
    )  # fmt: skip
    # as many outer folds as documents, up to the default 5 (fewer documents are refused)
    params["evaluate"]["folds"] = min(5, len({r["doc_id"] for r in rows}))
    for section, values in params_update.items():
        params[section].update(values)
    write_params(root, params)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
        "HDEVAL_CACHE": str(root / "llm-cache.sqlite"),
        "PYTHONPATH": str(root),
    }
    run([DVC, "init", "--no-scm", "-q"], root, env)
    return env, params


def write_params(root: Path, params: dict) -> None:
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def jsonl_ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]
