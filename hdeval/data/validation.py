"""Row validation of label files: every problem named by row, id and field, reported at once."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from hdeval.data.table import MAX_REPORTED_ERRORS, OPTIONAL_COLUMNS, ScoreRange
from hdeval.data.text_checks import InvalidUnicode, blank_errors, length_errors, unicode_problems
from hdeval.errors import ConfigError, DataValidationError

# --------------------------------------------------------------------------- validation

#: Default longest text field of a row, in characters (``data.max_field_chars``).
MAX_FIELD_CHARS = 1_000_000
#: The record key listing the fields whose invalid Unicode was replaced.
REPLACED = "unicode_replaced"


def _int_to_str(value: Any) -> Any:
    """Ids may be written as JSON integers; they are kept as text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


_Id = Annotated[str, BeforeValidator(_int_to_str)]


class _RowModel(BaseModel):
    """Structure and types of one label row; scores are checked per aspect afterwards."""

    model_config = ConfigDict(strict=True, extra="ignore")

    id: _Id
    doc_id: _Id
    system_id: _Id | None = None
    source: str
    output: str
    references: list[str] | None = None
    reference: str | None = None
    wrong_ending: str | None = None
    scores: dict[str, Any] | None = None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "boolean", int: "number", float: "number", str: "text", list: "list"}
    return names.get(type(value), "object" if isinstance(value, dict) else type(value).__name__)


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _pydantic_errors(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        field = _field_path(tuple(err["loc"]))
        if err["type"] == "missing":
            out.append(f"field '{field}': required field is missing")
            continue
        expected = {
            "string_type": "text",
            "list_type": "a list of text",
            "dict_type": "an object mapping aspect to score",
        }.get(err["type"], err["msg"])
        got = _type_name(err.get("input"))
        out.append(f"field '{field}': expected {expected}, got {got} {_preview(err['input'])}")
    return out


def _preview(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_score(aspect: str, value: Any, score_range: ScoreRange) -> str | None:
    field = f"scores.{aspect}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"field '{field}': expected a number, got {_type_name(value)} {_preview(value)}"
    if not math.isfinite(value):
        return f"field '{field}': score must be a finite number, got {value}"
    low, high = score_range
    if not low <= value <= high:
        return f"field '{field}': score {value} is outside the allowed range [{low:g}, {high:g}]"
    return None


def _validate_row(
    raw: Any,
    aspects: Sequence[str],
    ranges: Mapping[str, ScoreRange],
    max_chars: int = MAX_FIELD_CHARS,
    texts: bool = False,
    invalid_unicode: InvalidUnicode = "refuse",
) -> tuple[dict[str, Any] | None, list[str]]:
    """Validate one parsed row; return (canonical record or None, error messages).

    ``texts``: a row to score rather than a label row, whose ``doc_id`` may be left out
    (:func:`document_of` gives one). ``invalid_unicode``: see
    :func:`~hdeval.data.text_checks.unicode_problems`; the fields replaced are listed in the
    record under :data:`REPLACED`."""
    if not isinstance(raw, dict):
        return None, [f"expected a JSON object, got {_type_name(raw)}"]
    errors: list[str] = length_errors(raw, max_chars)
    if errors:
        return None, errors
    raw, errors, replaced = unicode_problems(raw, invalid_unicode)
    if texts and raw.get("doc_id") is None and isinstance(raw.get("source"), str):
        raw = {**raw, "doc_id": document_of(raw["source"])}
    row = None
    try:
        row = _RowModel.model_validate(raw)
    except ValidationError as exc:
        errors += _pydantic_errors(exc)
    errors += blank_errors(raw)
    if isinstance(raw.get("scores"), dict):
        errors += _score_errors(raw["scores"], aspects, ranges)
    elif aspects and raw.get("scores") is None:
        errors.append("field 'scores': missing; expected an object of aspect scores")
    if errors or row is None:
        return None, errors
    references = list(row.references) if row.references is not None else []
    if row.references is None and row.reference is not None and row.reference.strip():
        references = [row.reference]
    record = {
        "id": row.id,
        "doc_id": row.doc_id,
        "system_id": row.system_id,
        "source": row.source,
        "output": row.output,
        "references": references,
        **{c: getattr(row, c) for c in OPTIONAL_COLUMNS},
        "scores": {a: float(row.scores[a]) for a in aspects},
        REPLACED: replaced,
    }
    return record, []


def _score_errors(
    scores: Mapping[str, Any], aspects: Sequence[str], ranges: Mapping[str, ScoreRange]
) -> list[str]:
    errors = []
    for aspect in aspects:
        if aspect not in scores or scores[aspect] is None:
            errors.append(f"field 'scores.{aspect}': missing score for aspect '{aspect}'")
            continue
        problem = _check_score(aspect, scores[aspect], ranges[aspect])
        if problem:
            errors.append(problem)
    return errors


def _raw_id(raw: Any) -> str | None:
    if isinstance(raw, dict):
        value = raw.get("id")
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return str(value)
    return None


#: What a row of texts to score must hold, said where a text file is refused.
TEXT_ROW_HINT = (
    'a row to score needs "id", "source" (what the text was written from) and "output" (the '
    'text); "doc_id", "system_id", "references" and "scores" are optional'
)


def document_of(source: str) -> str:
    """The document id of a text row without one: its source's hash, so texts of one source
    are scored together and share its computation."""
    import hashlib

    return "source-" + hashlib.sha256(source.encode("utf-8", "replace")).hexdigest()[:16]


class _ErrorLog:
    """Collects located error messages and raises them together; ``hint`` ends the message."""

    def __init__(self, path: Path, what: str = "label file", hint: str = "") -> None:
        self.path = path
        self.what = what
        self.hint = hint
        self.messages: list[str] = []

    def add(self, where: str, message: str, row_id: str | None = None) -> None:
        located = f"{where} (id {row_id!r})" if row_id is not None else where
        self.messages.append(f"{located}: {message}" if where else message)

    def raise_if_any(self) -> None:
        if not self.messages:
            return
        count = len(self.messages)
        shown = self.messages[:MAX_REPORTED_ERRORS]
        lines = [f"{self.path}: {count} problem{'s' if count != 1 else ''} in {self.what}:"]
        lines += [f"  - {m}" for m in shown]
        if count > len(shown):
            lines.append(f"  ... and {count - len(shown)} more")
        if self.hint:
            lines.append(f"({self.hint})")
        raise DataValidationError("\n".join(lines))


# --------------------------------------------------------------------------- reading


def _normalise_ranges(
    aspects: Sequence[str], score_range: ScoreRange | Mapping[str, ScoreRange]
) -> dict[str, ScoreRange]:
    if isinstance(aspects, str) or not aspects:
        raise ConfigError("aspects must be a non-empty sequence of aspect names")
    if len(set(aspects)) != len(aspects):
        raise ConfigError(f"aspects contain duplicates: {list(aspects)}")
    if isinstance(score_range, Mapping):
        missing = [a for a in aspects if a not in score_range]
        if missing:
            raise ConfigError(f"score_range has no range for aspects: {missing}")
        ranges = {a: tuple(score_range[a]) for a in aspects}
    else:
        ranges = {a: tuple(score_range) for a in aspects}
    for aspect, bounds in ranges.items():
        if len(bounds) != 2 or not float(bounds[0]) < float(bounds[1]):
            raise ConfigError(f"score range for {aspect!r} must be (low, high) with low < high")
    return {a: (float(lo), float(hi)) for a, (lo, hi) in ranges.items()}
