"""The pipeline's stages in their one order: dvc.yaml's. ``hdeval train`` runs them without DVC.

dvc.yaml lists its stages in an order that runs: every stage after those whose outs it reads
(a test keeps it so). :func:`stage_commands` reads that list, with ``foreach`` stages expanded
(``layer@1``, ``layer@2``...), and :func:`run_stages` runs each stage's command in a project
directory, as ``dvc repro`` would on an empty cache, with no second list of stages to drift.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from hdeval.errors import ConfigError, HDEvalError
from hdeval.workspace import PARAMS_ENV


@dataclass(frozen=True)
class Stage:
    """One stage of dvc.yaml: its name as DVC shows it, and its command's arguments."""

    name: str
    argv: tuple[str, ...]


def stage_commands(root: Path) -> list[Stage]:
    """The stages of ``root/dvc.yaml`` in file order, ``foreach`` stages expanded per key."""
    path = root / "dvc.yaml"
    if not path.is_file():
        raise ConfigError(
            f"{path} not found: hdeval train runs the pipeline of a project checkout "
            "(dvc.yaml); run it in the project's directory"
        )
    stages = []
    for name, stage in yaml.safe_load(path.read_text())["stages"].items():
        if "foreach" in stage:
            for key in stage["foreach"]:
                command = stage["do"]["cmd"].replace("${key}", str(key))
                stages.append(Stage(f"{name}@{key}", tuple(shlex.split(command))))
        else:
            stages.append(Stage(name, tuple(shlex.split(stage["cmd"]))))
    return stages


def run_stages(
    root: Path,
    params_file: Path | None = None,
    until: str | None = None,
    layers: int | None = None,
    announce: Callable[[str], None] = print,
) -> list[str]:
    """Run every stage's command in ``root`` in order (through ``until``, inclusive; layers up
    to ``layers``, the params' ``hierarchy.layers``); returns the names run. ``params_file``
    replaces ``params.yaml`` for the stage scripts. A failing stage stops the run with its own
    message, as under ``dvc repro``; what finished stays."""
    stages = stage_commands(root)
    names = [s.name for s in stages]
    if until is not None and until not in names:
        raise ConfigError(f"no stage {until!r} in dvc.yaml; stages: {', '.join(names)}")
    env = dict(os.environ)
    if params_file is not None:
        env[PARAMS_ENV] = str(Path(params_file).resolve())
    done = []
    for stage in stages:
        kind, _, key = stage.name.partition("@")
        if kind == "layer" and layers is not None and int(key) > layers:
            continue
        announce(f"Running stage '{stage.name}'")
        argv = list(stage.argv)
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        code, tail = _run_passing_stderr(argv, root, env)
        if code != 0:
            prefix = f"stage {stage.name} failed: "
            said = [line for line in tail.splitlines() if line.startswith(prefix)]
            reason = said[-1][len(prefix) :] if said else f"exit {code}"
            raise HDEvalError(f"{prefix}{reason} (stages done: {', '.join(done) or 'none'})")
        done.append(stage.name)
        if stage.name == until:
            break
    return done


def _run_passing_stderr(argv: list[str], root: Path, env: dict) -> tuple[int, str]:
    """Run ``argv``: its stdout and stderr pass through as they come (progress bars included);
    returns its exit status and the last few kB of its stderr."""
    process = subprocess.Popen(argv, cwd=root, env=env, stderr=subprocess.PIPE)
    tail = b""
    assert process.stderr is not None
    while chunk := os.read(process.stderr.fileno(), 4096):
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        tail = (tail + chunk)[-8192:]
    return process.wait(), tail.decode("utf-8", "replace")
