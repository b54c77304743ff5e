"""Reading label files (JSON Lines, JSON arrays, CSV; strict UTF-8) into :class:`LabelledData`."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from hdeval.data.table import OPTIONAL_COLUMNS, LabelledData, ScoreRange, _build
from hdeval.data.text_checks import InvalidUnicode
from hdeval.data.validation import (
    MAX_FIELD_CHARS,
    REPLACED,
    TEXT_ROW_HINT,
    _ErrorLog,
    _normalise_ranges,
    _raw_id,
    _validate_row,
)
from hdeval.errors import DataValidationError

logger = logging.getLogger(__name__)

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson", ".json")
CSV_SUFFIXES = (".csv",)
_BOM = b"\xef\xbb\xbf"
_EMPTY = "file is empty; expected at least one labelled row"


def _utf8_problems(raw: bytes) -> list[tuple[int, int]]:
    """(byte offset, 1-based line) of the first invalid UTF-8 byte on each bad line.

    Splitting on newlines is safe: a newline byte never occurs inside a UTF-8 sequence.
    """
    found: list[tuple[int, int]] = []
    offset = 0
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            found.append((offset + exc.start, number))
        offset += len(line) + 1
    return found


def _utf8_message(byte: int, offset: int) -> str:
    return f"invalid UTF-8 byte 0x{byte:02x} at byte offset {offset}; save the file as UTF-8"


def _parse_json(text: str, log: _ErrorLog, where: str) -> tuple[bool, Any]:
    """(parsed, value) of one JSON text; a malformed, absurdly nested or huge-number text is
    logged against ``where`` instead of crashing the reader."""
    try:
        return True, json.loads(text)
    except json.JSONDecodeError as exc:
        log.add(where, f"malformed JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        log.add(where, "JSON nested too deeply to read")
    except ValueError as exc:  # an integer of more than 4,300 digits
        log.add(where, f"unreadable JSON value: {str(exc).split(';')[0]}")
    return False, None


def _json_lines_rows(
    lines: Iterable[bytes], log: _ErrorLog, base_offset: int = 0
) -> Iterator[tuple[str, Any]]:
    """Yield (location, parsed object) per non-blank line; decoding/parse errors are logged.

    ``lines`` may be an open binary file: rows are read one at a time.
    """
    offset, blank = base_offset, True
    for number, raw_line in enumerate(lines, start=1):
        line = raw_line.removesuffix(b"\n")
        start, offset = offset, offset + len(raw_line)
        where = f"line {number}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            log.add(where, _utf8_message(line[exc.start], start + exc.start))
            continue
        if not text.strip():
            continue
        blank = False
        parsed, value = _parse_json(text, log, where)
        if parsed:
            yield where, value
    if blank:
        log.add("", _EMPTY)


def _json_array_rows(text: str, log: _ErrorLog) -> Iterator[tuple[str, Any]]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        log.add(f"line {exc.lineno}", f"malformed JSON: {exc.msg} at column {exc.colno}")
        return
    except (RecursionError, ValueError):
        _parse_json(text, log, "")  # logs what is wrong
        return
    if not isinstance(items, list):
        log.add("", "a .json file must hold a JSON array of rows or one JSON object per line")
        return
    for number, item in enumerate(items, start=1):
        yield f"item {number}", item


def _csv_score_value(cell: str) -> Any:
    try:
        return float(cell)
    except ValueError:
        return cell


def _csv_rows(
    text: str, aspects: Sequence[str], log: _ErrorLog, texts: bool = False
) -> Iterator[tuple[str, Any]]:
    hint = "quote fields that contain commas, quotes or line breaks"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                io.StringIO(text),
                dtype=str,
                keep_default_na=False,
                na_filter=False,
                index_col=False,
            )
    except pd.errors.ParserWarning:
        log.add("", f"malformed CSV: a data row has more fields than the header; {hint}")
        return
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        log.add("", f"malformed CSV: {exc}; {hint}")
        return
    frame.columns = [str(c).strip() for c in frame.columns]
    score_columns = {}
    for aspect in aspects:
        found = [c for c in (aspect, f"scores.{aspect}") if c in frame.columns]
        if len(found) > 1:
            log.add("header", f"both '{found[0]}' and '{found[1]}' columns given; keep one")
        elif not found:
            log.add("header", f"missing score column '{aspect}' (or 'scores.{aspect}')")
        else:
            score_columns[aspect] = found[0]
    required = ("id", "source", "output") if texts else ("id", "doc_id", "source", "output")
    for column in required:
        if column not in frame.columns:
            log.add("header", f"missing column '{column}'")
    if log.messages:
        return
    for number, cells in enumerate(frame.to_dict("records"), start=1):
        row: dict[str, Any] = {k: cells[k] for k in required}
        if cells.get("doc_id", "").strip():
            row["doc_id"] = cells["doc_id"]
        if cells.get("system_id", "").strip():
            row["system_id"] = cells["system_id"]
        for optional in ("reference", *OPTIONAL_COLUMNS):
            if cells.get(optional, "").strip():
                row[optional] = cells[optional]
        row["scores"] = {
            a: _csv_score_value(cells[c]) for a, c in score_columns.items() if cells[c].strip()
        }
        yield f"data row {number}", row


def _parsed_rows(
    path: Path, handle: BinaryIO, aspects: Sequence[str], log: _ErrorLog, texts: bool = False
) -> Iterator[tuple[str, Any]]:
    suffix = path.suffix.lower()
    bom = len(_BOM) if handle.read(len(_BOM)) == _BOM else 0
    handle.seek(bom)
    if suffix in JSON_LINES_SUFFIXES and suffix != ".json":
        yield from _json_lines_rows(handle, log, base_offset=bom)
        return
    body = handle.read()
    if not body.strip():
        log.add("", _EMPTY)
        return
    if suffix == ".json" and body.lstrip()[:1] != b"[":
        yield from _json_lines_rows(body.splitlines(keepends=True), log, base_offset=bom)
        return
    problems = _utf8_problems(body)
    for offset, line in problems:
        log.add(f"line {line}", _utf8_message(body[offset], bom + offset))
    if problems:
        return
    text = body.decode("utf-8")
    if suffix in CSV_SUFFIXES:
        yield from _csv_rows(text, aspects, log, texts)
    else:
        yield from _json_array_rows(text, log)


def load_labels(
    path: str | Path,
    aspects: Sequence[str],
    score_range: ScoreRange | Mapping[str, ScoreRange],
    max_chars: int = MAX_FIELD_CHARS,
    invalid_unicode: InvalidUnicode = "refuse",
) -> LabelledData:
    """Read and validate a JSONL / JSON-array / CSV label file.

    ``score_range`` is one inclusive ``(low, high)`` for every aspect, or a mapping from aspect
    to its range. A text field longer than ``max_chars`` characters is an error, and so is
    invalid Unicode (a lone surrogate), unless ``invalid_unicode`` is ``replace``: then it
    becomes U+FFFD, the rows are named in a warning and in :attr:`LabelledData.replaced`.
    Raises :class:`DataValidationError` listing every problem found.
    """
    ranges = _normalise_ranges(aspects, score_range)
    return _load(Path(path), list(aspects), ranges, max_chars, invalid_unicode=invalid_unicode)


def load_texts(
    path: str | Path, max_chars: int = MAX_FIELD_CHARS, invalid_unicode: InvalidUnicode = "refuse"
) -> LabelledData:
    """Read texts to score: rows with ``id``, ``source`` and ``output`` (``doc_id``,
    ``system_id``, ``references`` optional; ``scores`` optional and ignored). A row without a
    ``doc_id`` gets its source's hash (:func:`~hdeval.data.validation.document_of`). Invalid
    Unicode as in :func:`load_labels`."""
    return _load(Path(path), [], {}, max_chars, True, invalid_unicode)


def _load(
    path: Path,
    aspects: list[str],
    ranges: dict[str, ScoreRange],
    max_chars: int,
    texts: bool = False,
    invalid_unicode: InvalidUnicode = "refuse",
) -> LabelledData:
    suffix = path.suffix.lower()
    if suffix not in JSON_LINES_SUFFIXES + CSV_SUFFIXES:
        raise DataValidationError(
            f"{path}: unsupported label file type {path.suffix!r}; use .jsonl, .json or .csv"
        )
    log = _ErrorLog(path, "texts file", TEXT_ROW_HINT) if texts else _ErrorLog(path)
    records: list[dict[str, Any]] = []
    first_seen: dict[str, str] = {}
    try:
        with open(path, "rb") as handle:
            for where, parsed in _parsed_rows(path, handle, aspects, log, texts):
                record, problems = _validate_row(
                    parsed, aspects, ranges, max_chars, texts, invalid_unicode
                )
                row_id = _raw_id(parsed)
                for problem in problems:
                    log.add(where, problem, row_id)
                if record is None:
                    continue
                row_id = record["id"]
                if row_id in first_seen:
                    message = (
                        f"field 'id': duplicate id {row_id!r}, first used at {first_seen[row_id]}"
                    )
                    log.add(where, message, row_id)
                    continue
                first_seen[row_id] = where
                records.append(record)
    except OSError as exc:
        raise DataValidationError(f"{path}: cannot read label file: {exc.strerror}") from exc
    if not records and not log.messages:
        log.add("", "file holds no labelled rows")
    log.raise_if_any()
    data = _build(records, list(aspects))
    replaced = {r["id"]: r[REPLACED] for r in records if r[REPLACED]}
    if replaced:
        named = "; ".join(f"{i!r}: {', '.join(f)}" for i, f in list(replaced.items())[:20])
        more = f" and {len(replaced) - 20} more" if len(replaced) > 20 else ""
        logger.warning(
            "%s: invalid Unicode replaced with U+FFFD in %d rows (%s%s)",
            path,
            len(replaced),
            named,
            more,
        )
    return LabelledData(data.samples, data.targets, replaced)


def save_labels(data: LabelledData, path: str | Path) -> None:
    """Write ``data`` as a canonical JSONL label file (UTF-8, one row per line)."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for row in data.rows():
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
