"""Public rating sets in their published form -> canonical label rows (see :mod:`hdeval.data`).

* ``topical-chat``: Topical-Chat with the USR turn-level ratings (UniEval's
  ``topical_chat.json``, a JSON array). A document is a dialogue context; the judge reads the
  dialogue history and the knowledge fact the response should use. The reference is the
  context's original ground-truth response (DHP perturbs it).
* ``sfres`` / ``sfhot``: Novikova et al.'s ratings of SF restaurant / hotel outputs (UniEval's
  ``sfres.json`` / ``sfhot.json``). A document is a meaning representation; the system names
  (WEN, LOLS) come from Novikova's ``emnlp_data_medians.csv``, whose rows of that data set match
  the JSON rows one-to-one by position (checked row by row: same MR, same output up to case and
  spacing, same scores).

Every row that cannot be converted is refused with its position and the reason; the rest are
written. Scores are copied unchanged.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdeval.data.reading import load_labels
from hdeval.data.table import ScoreRange
from hdeval.errors import DataValidationError

#: Topical-Chat (USR) scales: 1-3, 0-1 and overall 1-5; each score is a mean of 3 raters.
TOPICAL_CHAT_RANGES: dict[str, ScoreRange] = {
    "naturalness": (1.0, 3.0),
    "coherence": (1.0, 3.0),
    "engagingness": (1.0, 3.0),
    "groundedness": (0.0, 1.0),
    "understandability": (0.0, 1.0),
    "overall": (1.0, 5.0),
}
#: SFRES / SFHOT: medians of 3 crowd ratings on 1-6 (``overall`` is Novikova's "quality").
DATA_TO_TEXT_RANGES: dict[str, ScoreRange] = {
    "informativeness": (1.0, 6.0),
    "naturalness": (1.0, 6.0),
    "overall": (1.0, 6.0),
}
GROUND_TRUTH_SYSTEM = "Original Ground Truth"
FORMATS: tuple[str, ...] = ("topical-chat", "sfres", "sfhot")


@dataclass
class Conversion:
    """Converted rows and the refused ones, each as ``(where, reason)``."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


def ranges_of(fmt: str) -> dict[str, ScoreRange]:
    """The per-aspect human scales of a format."""
    return TOPICAL_CHAT_RANGES if fmt == "topical-chat" else DATA_TO_TEXT_RANGES


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _text_fields(item: Any, names: Sequence[str]) -> str | None:
    """Why ``item`` lacks one of the text fields ``names``, or None."""
    if not isinstance(item, dict):
        return f"expected a JSON object, got {type(item).__name__}"
    for name in names:
        value = item.get(name)
        if not isinstance(value, str) or not value.strip():
            return f"field '{name}' is missing, not text, or blank"
    return None


def _scores(item: dict, ranges: Mapping[str, ScoreRange]) -> tuple[dict[str, float], str | None]:
    scores = item.get("scores")
    if not isinstance(scores, dict):
        return {}, "field 'scores' is missing or not an object"
    out = {}
    for aspect, (low, high) in ranges.items():
        value = scores.get(aspect)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            return {}, f"field 'scores.{aspect}' is missing or not a finite number"
        if not low <= value <= high:
            return {}, f"field 'scores.{aspect}': {value} is outside [{low:g}, {high:g}]"
        out[aspect] = float(value)
    return out, None


# --------------------------------------------------------------------------- Topical-Chat


def dialogue_source(history: str, fact: str) -> str:
    """What the judge reads of a dialogue context: the history, one turn a line, then the fact."""
    turns = [t.strip() for t in history.strip().split("\n") if t.strip()]
    return "Conversation history:\n" + "\n".join(turns) + f"\n\nFact: {fact.strip()}"


def row_id_of(fmt: str, item: Mapping[str, Any], number: int) -> str:
    """The id a converted row of ``fmt`` gets from its published ``item`` (the ``number``-th,
    from 1): a file in the same form (a peer's predictions, say) maps onto the same rows."""
    if fmt == "topical-chat":
        return f"tc-{_digest(item['source'])}#{item['system_id']}"
    return f"{fmt}-{item.get('doc_id', number - 1)}"


def topical_chat_rows(items: Sequence[Any]) -> Conversion:
    """Canonical rows of Topical-Chat items (``source``, ``context``, ``system_id``,
    ``system_output``, ``scores``); ``doc_id`` is a hash of the dialogue history."""
    result = Conversion()
    references: dict[str, str] = {}
    for item in items:
        usable = _text_fields(item, ("source", "system_id", "system_output")) is None
        if usable and item["system_id"] == GROUND_TRUTH_SYSTEM:
            references.setdefault(item["source"], item["system_output"].strip())
    seen: set[str] = set()
    for number, item in enumerate(items, start=1):
        where = f"item {number}"
        problem = _text_fields(item, ("source", "context", "system_id", "system_output"))
        scores: dict[str, float] = {}
        if problem is None:
            scores, problem = _scores(item, TOPICAL_CHAT_RANGES)
        if problem is not None:
            result.refused.append((where, problem))
            continue
        doc_id = f"tc-{_digest(item['source'])}"
        row_id = row_id_of("topical-chat", item, number)
        if row_id in seen:
            result.refused.append(
                (
                    where,
                    f"second response of system {item['system_id']!r} to the same dialogue context",
                )
            )
            continue
        seen.add(row_id)
        reference = references.get(item["source"])
        result.rows.append(
            {
                "id": row_id,
                "doc_id": doc_id,
                "system_id": item["system_id"],
                "source": dialogue_source(item["source"], item["context"]),
                "output": item["system_output"].strip(),
                "references": [reference] if reference else [],
                "scores": scores,
            }
        )
    return result


# --------------------------------------------------------------------------- SFRES / SFHOT


def _loose(text: str) -> str:
    """Lower-cased, without spaces: Novikova's outputs match UniEval's up to case and spacing."""
    return "".join(text.lower().split())


def read_systems(medians_csv: str | Path, dataset: str) -> list[dict[str, str]]:
    """The rows of ``dataset`` (SFRES, SFHOT) in Novikova's ``emnlp_data_medians.csv``, in order."""
    try:
        with open(medians_csv, encoding="utf-8", newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("dataset") == dataset]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataValidationError(f"{medians_csv}: cannot read: {exc}") from exc
    if not rows or not {"system", "mr", "sys_ref"} <= set(rows[0]):
        raise DataValidationError(
            f"{medians_csv}: no {dataset} rows with columns system, mr, sys_ref"
        )
    return rows


def _system_mismatch(item: dict, row: dict[str, str]) -> str | None:
    if _loose(row["mr"]) != _loose(item["source"]):
        return f"its MR differs from the system table's row ({row['mr']!r})"
    if _loose(row["sys_ref"]) != _loose(item["system_output"]):
        return f"its output differs from the system table's row ({row['sys_ref']!r})"
    return None


def data_to_text_rows(
    items: Sequence[Any], dataset: str, systems: Sequence[Mapping[str, str]] | None = None
) -> Conversion:
    """Canonical rows of SFRES/SFHOT items (``doc_id``, ``source``, ``reference``,
    ``system_output``, ``scores``); ``doc_id`` is a hash of the meaning representation.

    ``systems`` (from :func:`read_systems`) names each row's system; a row whose table row does
    not match it is refused, and so is every row when the table's length differs.
    """
    prefix = dataset.lower()
    result = Conversion()
    if systems is not None and len(systems) != len(items):
        raise DataValidationError(
            f"the system table has {len(systems)} {dataset} rows, the ratings file {len(items)}: "
            "they must match one-to-one by position"
        )
    seen: set[str] = set()
    for number, item in enumerate(items, start=1):
        where = f"item {number}"
        problem = _text_fields(item, ("source", "reference", "system_output"))
        scores: dict[str, float] = {}
        if problem is None:
            scores, problem = _scores(item, DATA_TO_TEXT_RANGES)
        if problem is None and systems is not None:
            problem = _system_mismatch(item, systems[number - 1])
        if problem is not None:
            result.refused.append((where, problem))
            continue
        row_id = row_id_of(prefix, item, number)
        if row_id in seen:
            result.refused.append((where, f"duplicate doc_id {item.get('doc_id')!r}"))
            continue
        seen.add(row_id)
        result.rows.append(
            {
                "id": row_id,
                "doc_id": f"{prefix}-{_digest(item['source'])}",
                "system_id": systems[number - 1]["system"] if systems is not None else None,
                "source": item["source"].strip(),
                "output": item["system_output"].strip(),
                "references": [item["reference"].strip()],
                "scores": scores,
            }
        )
    return result


# --------------------------------------------------------------------------- files


def _read_array(path: Path) -> list[Any]:
    try:
        items = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataValidationError(f"{path}: cannot read as a JSON array: {exc}") from exc
    if not isinstance(items, list):
        raise DataValidationError(f"{path}: expected a JSON array of rows")
    return items


def convert_rows(fmt: str, src: str | Path, systems_csv: str | Path | None = None) -> Conversion:
    """The canonical rows of ``src`` of format ``fmt`` (:data:`FORMATS`) and the refused ones.

    Raises :class:`DataValidationError` when no row could be converted.
    """
    if fmt not in FORMATS:
        raise DataValidationError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    items = _read_array(Path(src))
    if fmt == "topical-chat":
        result = topical_chat_rows(items)
    else:
        dataset = fmt.upper()
        systems = read_systems(systems_csv, dataset) if systems_csv is not None else None
        result = data_to_text_rows(items, dataset, systems)
    if not result.rows:
        shown = "; ".join(f"{w}: {r}" for w, r in result.refused[:5])
        raise DataValidationError(f"{src}: no row could be converted ({shown})")
    return result


def write_rows(rows: Sequence[Mapping[str, Any]], dst: str | Path, fmt: str) -> None:
    """Write canonical rows to a JSONL ``dst``, in one step once they read back as a valid
    label file on the format's per-aspect scales."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.stem}.tmp.jsonl")
    with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    ranges = ranges_of(fmt)
    try:
        load_labels(tmp, list(ranges), ranges)
    except DataValidationError:
        tmp.unlink()
        raise
    tmp.replace(dst)


def convert(
    fmt: str, src: str | Path, dst: str | Path, systems_csv: str | Path | None = None
) -> Conversion:
    """Convert ``src`` to the canonical JSONL ``dst``; the refused rows are returned."""
    result = convert_rows(fmt, src, systems_csv)
    write_rows(result.rows, dst, fmt)
    return result
