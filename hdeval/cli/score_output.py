"""Where ``hdeval score`` writes: checked before any scoring, streamed row by row, resumable.

Each finished row is appended to the JSON Lines file and flushed to disk at once, so a run that
is killed keeps every row it finished. ``--resume`` continues such a file: its complete rows with
every aspect scored are kept and skipped, a row cut off by the kill or left without a score is
scored again. An existing file is never overwritten, and an output path that is one of the
command's inputs is refused.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from hdeval.errors import ConfigError


def check_out_path(out: Path, inputs: Iterable[Path | None], option: str = "--out") -> None:
    """Refuse an output path whose directory is missing or that names one of ``inputs``.

    An input that is a directory (a bundle) covers every path inside it.
    """
    if out.is_dir():
        raise ConfigError(f"{option} {out} is a directory; give a file name")
    if not out.parent.is_dir():
        raise ConfigError(f"{option} {out}: directory {out.parent} does not exist")
    target = out.resolve()
    for path in filter(None, inputs):
        source = path.resolve()
        if target == source or source in target.parents:
            raise ConfigError(f"{option} {out} is an input of this command ({path}); refused")


def _complete(row: object) -> bool:
    scores = row.get("scores") if isinstance(row, dict) else None
    return isinstance(scores, dict) and bool(scores) and None not in scores.values()


class ScoreWriter:
    """Appends JSON rows to ``out`` (or stdout when ``out`` is None), flushing each one."""

    def __init__(self, out: Path | None, ids: Iterable[str], resume: bool = False) -> None:
        self.out = out
        self.done: set[str] = set()
        self.written = 0
        self._handle: IO[str] | None = None
        if out is None:
            if resume:
                raise ConfigError("--resume needs --out: the file of the run to continue")
            self._handle = sys.stdout
            return
        existing = out.is_file() and out.stat().st_size > 0
        if existing and not resume:
            raise ConfigError(
                f"--out {out} already exists; pass --resume to continue that run (its finished "
                "rows are kept) or remove the file"
            )
        if existing:
            self._resume(out, set(ids))

    def _resume(self, out: Path, ids: set[str]) -> None:
        """Keep the complete, fully scored rows of ``out`` (rewritten atomically)."""
        kept: list[str] = []
        lines = out.read_text(encoding="utf-8", errors="replace").split("\n")
        for number, line in enumerate(lines[:-1], start=1):  # the last piece has no newline
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                raise ConfigError(
                    f"--out {out} line {number} is not a score row; not resuming it"
                ) from None
            row_id = row.get("id") if isinstance(row, dict) else None
            if row_id not in ids:
                raise ConfigError(
                    f"--out {out} line {number}: id {row_id!r} is not among the inputs; "
                    "this is the output of another run, not resuming it"
                )
            if _complete(row) and row_id not in self.done:
                self.done.add(row_id)
                kept.append(line + "\n")
        tmp = out.with_name(f".{out.name}.resume-{os.getpid()}")
        tmp.write_text("".join(kept), encoding="utf-8")
        tmp.replace(out)

    def write(self, rows: Iterable[dict]) -> None:
        """Append ``rows`` and force them to disk (the file is created by the first write)."""
        if self._handle is None:
            self._handle = open(self.out, "a", encoding="utf-8", newline="\n")  # noqa: SIM115
        for row in rows:
            self._handle.write(json.dumps(row) + "\n")
            self.written += 1
        self._handle.flush()
        if self.out is not None:
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self.out is not None and self._handle is not None:
            self._handle.close()
