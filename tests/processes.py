"""Run a test worker module in a real process and SIGKILL it once it has done some work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def start_worker(module: str, *args: str, **popen) -> subprocess.Popen:
    """``python -m tests.<module> ARGS`` from the repository root, stderr captured."""
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.{module}", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        **{"stdout": subprocess.DEVNULL, **popen},
    )


def kill_when(
    worker: subprocess.Popen, ready: Callable[[], bool], timeout: float = 300, group: bool = False
) -> None:
    """SIGKILL ``worker`` as soon as ``ready()``; fail if it ended or stalled before that.

    With ``group`` the worker's whole process group is killed (start it with
    ``start_new_session=True``), as a closed terminal kills a command and its children.
    """
    deadline = time.monotonic() + timeout
    while not ready() and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
    if group:
        os.killpg(worker.pid, signal.SIGKILL)
    else:
        os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
