"""`hdeval compare` and `hdeval dhp` as users run them: the real embedded judge, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dvc_project import first_source_words

pytestmark = pytest.mark.model
HDEVAL = str(Path(sys.executable).parent / "hdeval")


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HDEVAL_CACHE": str(cwd / "cache.sqlite")}
    return subprocess.run(
        [HDEVAL, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture()
def labels(tmp_path, summeval_rows, embedded_dir) -> Path:
    """Two documents (their first 120 words) x 3 systems, coherence only."""
    rows = [
        first_source_words(r, 120) for r in summeval_rows if r["system_id"] in {"M0", "M8", "M22"}
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_compare_prints_one_table_of_every_scorer(labels, tmp_path):
    criteria = Path(__file__).resolve().parents[1] / "data" / "summeval" / "aspects.yaml"
    done = _run(
        [
            "compare",
            str(labels),
            "--scorer",
            "direct-prompt",
            "--scorer",
            "rouge",
            "--criteria",
            str(criteria),
            "--aspects",
            "coherence",
            "--bootstrap",
            "5",
            "--csv",
            "table.csv",
            "--markdown",
            "table.md",
            "--dhp",
            "dhp",
            "--dhp-texts",
            "2",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = (tmp_path / "table.csv").read_text()
    assert "direct-prompt" in table and "rouge:rouge1" in table
    markdown = (tmp_path / "table.md").read_text()
    assert "| direct-prompt | dataset | pearson | 6 |" in markdown
    # DHP of every scorer on the same perturbed texts, in the same report
    assert "| scorer | texts | D_avg | D_min | D_avg^EW | D_min^EW | not discerned |" in markdown
    assert "| direct-prompt | 2 |" in markdown and "| rouge | 2 |" in markdown
    assert (tmp_path / "dhp" / "rouge.csv").is_file()
    assert "direct-prompt: D_avg" in done.stderr


def test_dhp_writes_table_chart_and_refuses_with_fail(labels, tmp_path):
    criteria = Path(__file__).resolve().parents[1] / "data" / "summeval" / "aspects.yaml"
    args = [
        "dhp",
        str(labels),
        "--out",
        "dhp",
        "--scorer",
        "direct-prompt",
        "--criteria",
        str(criteria),
        "--aspects",
        "coherence",
        "--n-texts",
        "2",
    ]
    done = _run([*args, "--threshold", "50", "--fail"], tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "DHP refused direct-prompt" in done.stderr and "reorder_major" in done.stderr
    summary = json.loads((tmp_path / "dhp" / "summary.json").read_text())
    assert summary["direct-prompt"]["n_texts"] == 2
    assert (tmp_path / "dhp" / "direct-prompt.png").stat().st_size > 0
    table = (tmp_path / "dhp" / "direct-prompt.csv").read_text()
    assert "deletion_minor" in table and "instruction_injection" in table
    assert _run(args, tmp_path).returncode == 0  # warn: scored from the cache, accepted
