"""A published evaluator's per-row predictions (UniEval's, or your own peer's) as a scorer of the
comparison table: a yardstick on exactly the bundle's rows, never an input of the bundle.

A peer file is one of (``evaluate.peer.format``):

* ``jsonl``: one JSON object a line, ``{"id": "<row id of the label file>", "scores":
  {"<aspect>": <number>, ...}}`` (docs/data.md);
* ``topical-chat``, ``sfres``, ``sfhot``: a published result file in the form of the data file
  ``hdeval data convert`` reads (a JSON array, row i the data's row i), its predictions under
  ``predict_scores``, as UniEval publishes them; rows get the ids the converter gives.

Every row of the run must have a prediction for every aspect: a missing one is an error naming
the row, never a silent subset.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from hdeval.data.convert import FORMATS, row_id_of
from hdeval.errors import DataValidationError

PEER_FORMATS = ("jsonl", *FORMATS)


def read_peer(path: str | Path, fmt: str, aspects: list[str]) -> pd.DataFrame:
    """The peer's predictions: a table indexed by row id, one column per aspect."""
    path = Path(path)
    if fmt not in PEER_FORMATS:
        raise DataValidationError(f"unknown peer format {fmt!r}; choose one of {PEER_FORMATS}")
    try:
        text = path.read_text(encoding="utf-8")
        if fmt == "jsonl":
            rows = [(n, json.loads(line)) for n, line in enumerate(text.splitlines(), 1) if line]
        else:
            rows = list(enumerate(json.loads(text), 1))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataValidationError(f"peer file {path}: cannot read: {exc}") from exc
    table: dict[str, dict[str, float]] = {}
    for number, item in rows:
        where = f"peer file {path}, {'line' if fmt == 'jsonl' else 'item'} {number}"
        row_id, scores = _entry(item, fmt, number, where)
        table[row_id] = {a: _number(scores, a, where) for a in aspects}
    return pd.DataFrame.from_dict(table, orient="index", columns=aspects)


def peer_scores(peer: pd.DataFrame, ids: pd.Index, path: str | Path) -> pd.DataFrame:
    """The peer's predictions of exactly the rows ``ids``; a row it lacks is an error."""
    missing = [str(i) for i in ids if str(i) not in peer.index]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        shown = ", ".join(missing[:5]) + more
        raise DataValidationError(
            f"peer file {path} has no prediction for row {shown}: a peer is compared "
            "on exactly the bundle's rows"
        )
    return peer.loc[[str(i) for i in ids]].set_axis(ids)


def _entry(item: Any, fmt: str, number: int, where: str) -> tuple[str, Any]:
    if not isinstance(item, dict):
        raise DataValidationError(f"{where}: expected a JSON object")
    try:
        if fmt == "jsonl":
            return str(item["id"]), item["scores"]
        return row_id_of(fmt, item, number), item["predict_scores"]
    except KeyError as exc:
        raise DataValidationError(f"{where}: field {exc.args[0]!r} is missing") from None


def _number(scores: Any, aspect: str, where: str) -> float:
    value = scores.get(aspect) if isinstance(scores, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DataValidationError(f"{where}: no finite prediction for aspect {aspect!r}")
    return float(value)
