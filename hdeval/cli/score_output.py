"""Where ``hdeval score`` writes: checked before any scoring, streamed row by row, resumable.

Each finished row is appended to the JSON Lines file and flushed to disk at once, so a run that
is killed keeps every row it finished. Each row names the bundle and the judge that scored it.
``--resume`` continues such a file: its complete rows with every aspect scored are kept and
skipped, a row cut off by the kill or left without a score is scored again. Each row carries the
sha256 of what was scored (:func:`content_sha256`: id, document, source, text, references) and
of the parameters that change a score (:func:`params_sha256`); a row whose text or parameters
differ from this run's is scored again too. A file written by another bundle or judge is refused
(one file never mixes two evaluators' scores), and it is left as it is until the judge is known
to be the same. An existing file is never overwritten, and an output path that is one of the
command's inputs is refused.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from hdeval.errors import ConfigError
from hdeval.llm.cache import cache_key
from hdeval.params import LLMConfig
from hdeval.paths import write_text_atomic
from hdeval.scoring.run import Sample

#: Why a row of a resumed file is scored again.
UNHASHED = "no content hash"
UNSCORED, CONTENT_CHANGED, PARAMS_CHANGED = (
    "left without a score",
    "content changed",
    "params changed",
)


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


def content_sha256(sample: Sample) -> str:
    """The sha256 of everything of ``sample`` that is scored."""
    return cache_key("score-row", sample.id, sample.doc_id, sample.source, sample.output,
                     list(sample.references))  # fmt: skip


def params_sha256(llm: LLMConfig, invalid_unicode: str, explain: bool) -> str:
    """The sha256 of the parameters that change a row's scores, other than the bundle and the
    judge (each row names those, and a file of another is refused)."""
    return cache_key(
        "score-params",
        {
            "llm.max_context": llm.max_context,
            "llm.min_digit_mass": llm.min_digit_mass,
            "invalid_unicode": invalid_unicode,
            "explain": explain,
        },
    )


def bundle_record(path: Path, card: dict) -> dict[str, str]:
    """How a row names the bundle that scored it: the path given and the card's hash."""
    return {"path": str(path), "card_sha256": card["card_sha256"]}


def _named(bundle: object) -> str:
    if not isinstance(bundle, dict):
        return "an unnamed bundle"
    return f"{bundle.get('path')} (card sha256 {str(bundle.get('card_sha256'))[:12]})"


class ScoreWriter:
    """Appends JSON rows to ``out`` (or stdout when ``out`` is None), flushing each one.

    ``bundle`` (:func:`bundle_record`) is what scores this run: with ``resume`` every kept row
    must name the same bundle, and, checked by :meth:`begin` once the judge is loaded, the same
    judge. ``contents`` maps each input id to its :func:`content_sha256`, ``params`` is this
    run's :func:`params_sha256`: a kept row must carry both (:meth:`hashes`)."""

    def __init__(
        self,
        out: Path | None,
        contents: Mapping[str, str],
        bundle: dict,
        resume: bool = False,
        params: str = "",
    ) -> None:
        self.out = out
        self.bundle = bundle
        self.contents, self.params = contents, params
        self.judge: str | None = None
        self.done: set[str] = set()
        self.again: dict[str, str] = {}  # id -> why a row of the file is scored again
        self.written = 0
        self._kept: list[tuple[str, dict]] = []
        self._resuming = False
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
        self._resuming = existing
        if existing:
            self._read(out, set(contents))

    @property
    def resuming(self) -> bool:
        """Whether this run continues an existing file."""
        return self._resuming

    def hashes(self, row_id: str) -> dict[str, str]:
        """What a row of ``row_id`` carries to be kept by a later ``--resume``."""
        return {"content_sha256": self.contents[row_id], "params_sha256": self.params}

    def summary(self, todo: int) -> str:
        """How much of the resumed file is kept, scored again and why, and how much is new."""
        why = Counter(self.again.values())
        reasons = ", ".join(
            reason if len(why) == 1 else f"{n} {reason}" for reason, n in why.most_common()
        )
        again = f"{len(self.again)} re-scored" + (f" ({reasons})" if reasons else "")
        return f"{len(self.done)} rows kept, {again}, {todo - len(self.again)} new"

    def _why_again(self, row: dict) -> str | None:
        """Why a complete row of the file is not this run's (another text, other params)."""
        if "content_sha256" not in row:
            return UNHASHED
        if row.get("content_sha256") != self.contents[row["id"]]:
            return CONTENT_CHANGED
        if row.get("params_sha256") != self.params:
            return PARAMS_CHANGED
        return None

    def _read(self, out: Path, ids: set[str]) -> None:
        """Find the complete, fully scored rows of ``out``; refuse a file of another run or
        another bundle. The file is not changed here."""
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
            theirs = row.get("bundle")
            ours = self.bundle["card_sha256"]
            if not isinstance(theirs, dict) or theirs.get("card_sha256") != ours:
                raise ConfigError(
                    f"--out {out} line {number} was scored by the bundle {_named(theirs)}, this "
                    f"run scores with {_named(self.bundle)}: one file would mix two evaluators' "
                    "scores; not resuming it (write to another --out)"
                )
            if row_id in self.done:
                continue
            why = self._why_again(row) if _complete(row) else UNSCORED
            if why is None:
                self.done.add(row_id)
                self._kept.append((line + "\n", row))
                self.again.pop(row_id, None)
            else:
                self.again.setdefault(row_id, why)

    def begin(self, judge: str | None) -> None:
        """Refuse a resumed file whose kept rows another ``judge`` scored (None: no text is left
        to score, so none is loaded), then rewrite it atomically with its kept rows only."""
        self.judge = judge
        if self.out is None or not self._resuming:
            return
        for _, row in self._kept:
            if judge is not None and row.get("judge") != judge:
                raise ConfigError(
                    f"--out {self.out} row {row['id']!r} was scored by the judge "
                    f"{row.get('judge')!r}, this run's judge is {judge!r}: one file would mix "
                    "two judges' scores; not resuming it (write to another --out)"
                )
        write_text_atomic(self.out, "".join(line for line, _ in self._kept))

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
