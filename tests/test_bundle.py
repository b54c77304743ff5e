"""Bundle export is atomic: an exporting process killed with SIGKILL never leaves half a bundle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hdeval.atomic_dir import staged_dir
from hdeval.errors import HDEvalError
from hdeval.export.evaluator import Evaluator
from tests import export_worker
from tests.processes import start_worker

REPO = Path(__file__).resolve().parents[1]
N_EXPORTS = 8


@pytest.fixture(scope="module")
def fitted():
    return export_worker.fitted()


def _dead_pid() -> int:
    """The pid of a process that has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _check_bundle(path: Path, pipeline, X: np.ndarray) -> int:
    """Load the bundle as production does, check its predictions; return its version."""
    judge = SimpleNamespace(identity=export_worker.IDENTITY)
    evaluator = Evaluator.load(path, judge)
    predicted = evaluator.aggregator.predict(X[:20])
    np.testing.assert_allclose(predicted, pipeline.predict(X[:20]), atol=1e-4)
    return evaluator.card["metrics"]["version"]


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def test_kill_minus_nine_during_export_leaves_previous_or_new_bundle(fitted, tmp_path) -> None:
    """Kill exporting processes at increasing delays until one finishes all its exports."""
    pipeline, X = fitted
    path = tmp_path / "bundle"
    export_worker.export(path, -1, pipeline, X)
    current, delay, kills = -1, 0.0, 0
    killed: set[int] = set()
    while True:
        worker = start_worker(
            "export_worker", str(path), str(N_EXPORTS), stdout=subprocess.PIPE, text=True
        )
        assert worker.stdout.readline() == "ready\n", worker.stderr.read()[-2000:]
        time.sleep(delay)
        os.kill(worker.pid, signal.SIGKILL)  # a no-op if it has already finished
        finished = worker.wait() == 0
        reported = [int(line.split()[1]) for line in worker.stdout.read().splitlines()]
        last = reported[-1] if reported else current
        # Every export the worker reported is kept; at most the one it was writing is newer.
        current = _check_bundle(path, pipeline, X)
        assert current in {last, (reported[-1] + 1) if reported else 0}
        if finished:
            break
        kills += 1
        killed.add(worker.pid)
        # only killed writers leave anything (one killed while it removed an earlier one's
        # leftover leaves part of that too); the next writer to finish removes them all
        assert all(int(name.rsplit("-", 1)[1]) in killed for name in _leftovers(path))
        delay = delay * 1.5 + 0.03
    assert kills >= 3
    assert current == N_EXPORTS - 1
    assert _leftovers(path) == []  # the killed workers' temporary directories are gone


def test_failed_export_keeps_the_previous_bundle(fitted, tmp_path) -> None:
    pipeline, X = fitted
    path = tmp_path / "bundle"
    export_worker.export(path, 1, pipeline, X)
    with pytest.raises(HDEvalError, match="parity sample"):
        export_worker.export(path, 2, pipeline, X[:, :2])  # a sample of the wrong width
    assert _check_bundle(path, pipeline, X) == 1
    assert _leftovers(path) == []


def test_replacement_cut_between_its_two_renames_is_rolled_back(tmp_path) -> None:
    """Where no atomic exchange exists, the previous directory is moved aside first; if the
    writer dies before the new one is in place, the next write puts the previous one back."""
    path = tmp_path / "bundle"
    pid = _dead_pid()
    previous = tmp_path / f".bundle.old-{pid}"
    previous.mkdir()
    (previous / "card.json").write_text("previous")
    unfinished = tmp_path / f".bundle.tmp-{pid}"
    unfinished.mkdir()
    (unfinished / "card.json").write_text("new, complete but not yet in place")
    with staged_dir(path) as tmp:
        assert (path / "card.json").read_text() == "previous"
        assert not previous.exists() and not unfinished.exists()
        (tmp / "card.json").write_text("newest")
    assert (path / "card.json").read_text() == "newest"
    assert _leftovers(path) == []


def test_temporary_directory_of_a_live_writer_is_left_alone(tmp_path) -> None:
    path = tmp_path / "bundle"
    live = tmp_path / f".bundle.tmp-{os.getppid()}"
    live.mkdir()
    with staged_dir(path) as tmp:
        (tmp / "card.json").write_text("new")
    assert live.is_dir() and (path / "card.json").read_text() == "new"
