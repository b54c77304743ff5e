"""Human-label data: loading, validation, document-level splits and merging.

A label file holds one row per (document, system output) pair with human scores for one or
more aspects. The canonical form is JSON Lines, one object per line::

    {"id": "d1#m1", "doc_id": "d1", "system_id": "m1", "source": "...", "output": "...",
     "references": ["..."], "scores": {"coherence": 4.0, "fluency": 5.0}}

``system_id`` and ``references`` are optional (a single ``"reference"`` string is accepted
too). So is ``wrong_ending``: a known-wrong alternative to the reference (Story Cloze's wrong
ending), which DHP's story task substitutes for it; a document's is read from its first row. CSV
files use the columns ``id, doc_id, source, output`` plus optional ``system_id``, ``reference``
and ``wrong_ending``, and one score column per aspect, named ``<aspect>`` or ``scores.<aspect>``.

Every problem found in a file is reported in one :class:`DataValidationError` that names the
file, the row, the row's id and the field, so a file can be fixed in one pass.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from hdeval.errors import ConfigError, DataValidationError

SAMPLE_COLUMNS: tuple[str, ...] = ("doc_id", "system_id", "source", "output", "references")
#: A known-wrong alternative to a document's reference (DHP's story task swaps it in).
WRONG_ENDING = "wrong_ending"
#: Sample columns present only when some row of the file gives them.
OPTIONAL_COLUMNS: tuple[str, ...] = (WRONG_ENDING,)
MAX_REPORTED_ERRORS = 20
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson", ".json")
CSV_SUFFIXES = (".csv",)

ScoreRange = tuple[float, float]
_BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------- container


@dataclass(frozen=True, eq=False)
class LabelledData:
    """Texts and human scores, both indexed by the row ``id``.

    ``samples`` has the columns ``doc_id``, ``system_id`` (str or None), ``source``,
    ``output`` and ``references`` (list of str, possibly empty), and any of
    :data:`OPTIONAL_COLUMNS` some row gives (None where a row does not). ``targets`` has one
    float column per aspect.
    """

    samples: pd.DataFrame
    targets: pd.DataFrame

    def __post_init__(self) -> None:
        missing = [c for c in SAMPLE_COLUMNS if c not in self.samples.columns]
        if missing:
            raise ValueError(f"samples is missing columns: {missing}")
        if not self.samples.index.equals(self.targets.index):
            raise ValueError("samples and targets must have the same index, in the same order")
        if not self.samples.index.is_unique:
            raise ValueError("row ids must be unique")

    @property
    def aspects(self) -> list[str]:
        """The scored aspects, in column order."""
        return [str(c) for c in self.targets.columns]

    @property
    def ids(self) -> list[str]:
        """Row ids, in row order."""
        return [str(i) for i in self.samples.index]

    def __len__(self) -> int:
        return len(self.samples)

    def subset(self, ids: Iterable[str]) -> LabelledData:
        """The rows with these ids, in the order given; unknown ids raise ``KeyError``."""
        wanted = list(ids)
        unknown = [i for i in wanted if i not in self.samples.index]
        if unknown:
            raise KeyError(f"unknown row ids: {unknown[:MAX_REPORTED_ERRORS]}")
        return LabelledData(self.samples.loc[wanted].copy(), self.targets.loc[wanted].copy())

    def rows(self) -> Iterator[dict[str, Any]]:
        """Each row as a canonical JSON-ready dict (the label-file schema)."""
        for row_id, sample, scores in zip(
            self.samples.index,
            self.samples.itertuples(index=False),
            self.targets.itertuples(index=False),
            strict=True,
        ):
            yield {
                "id": str(row_id),
                "doc_id": sample.doc_id,
                "system_id": sample.system_id,
                "source": sample.source,
                "output": sample.output,
                "references": list(sample.references),
                **{
                    c: getattr(sample, c)
                    for c in OPTIONAL_COLUMNS
                    if c in self.samples.columns and isinstance(getattr(sample, c), str)
                },
                "scores": {a: float(v) for a, v in zip(self.aspects, scores, strict=True)},
            }

    def fingerprint(self) -> str:
        """sha256 of a canonical JSON of every row (ids, texts, scores), sorted by id.

        Row order does not change the fingerprint; any text or score change does.
        """
        digest = hashlib.sha256()
        digest.update(_canonical_json({"aspects": sorted(self.aspects)}).encode("utf-8"))
        for row in sorted(self.rows(), key=lambda r: r["id"]):
            digest.update(b"\n")
            digest.update(_canonical_json(row).encode("utf-8"))
        return digest.hexdigest()


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _build(records: Sequence[Mapping[str, Any]], aspects: Sequence[str]) -> LabelledData:
    """Make a LabelledData from validated records (dicts in the canonical schema)."""
    index = pd.Index([r["id"] for r in records], dtype=object, name="id")
    columns = SAMPLE_COLUMNS + tuple(
        c for c in OPTIONAL_COLUMNS if any(r.get(c) is not None for r in records)
    )
    samples = pd.DataFrame(
        {col: pd.Series([r.get(col) for r in records], dtype=object) for col in columns}
    )
    samples.index = index
    targets = pd.DataFrame(
        {a: np.array([r["scores"][a] for r in records], dtype=np.float64) for a in aspects},
        index=index.copy(),
    )
    return LabelledData(samples, targets)


# --------------------------------------------------------------------------- validation


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


def _blank_errors(raw: Mapping[str, Any]) -> list[str]:
    """Empty or whitespace-only texts (checked even when other fields have type errors)."""
    errors = []
    for field in ("id", "doc_id", "source", "output", *OPTIONAL_COLUMNS):
        value = raw.get(field)
        if isinstance(value, str) and not value.strip():
            errors.append(f"field '{field}': must not be empty or whitespace only")
    references = raw.get("references")
    if isinstance(references, list):
        for i, ref in enumerate(references):
            if isinstance(ref, str) and not ref.strip():
                errors.append(f"field 'references[{i}]': must not be empty or whitespace only")
    return errors


def _validate_row(
    raw: Any, aspects: Sequence[str], ranges: Mapping[str, ScoreRange]
) -> tuple[dict[str, Any] | None, list[str]]:
    """Validate one parsed row; return (canonical record or None, error messages)."""
    if not isinstance(raw, dict):
        return None, [f"expected a JSON object, got {_type_name(raw)}"]
    errors: list[str] = []
    row = None
    try:
        row = _RowModel.model_validate(raw)
    except ValidationError as exc:
        errors += _pydantic_errors(exc)
    errors += _blank_errors(raw)
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


class _ErrorLog:
    """Collects located error messages and raises them together."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[str] = []

    def add(self, where: str, message: str, row_id: str | None = None) -> None:
        located = f"{where} (id {row_id!r})" if row_id is not None else where
        self.messages.append(f"{located}: {message}" if where else message)

    def raise_if_any(self) -> None:
        if not self.messages:
            return
        count = len(self.messages)
        shown = self.messages[:MAX_REPORTED_ERRORS]
        lines = [f"{self.path}: {count} problem{'s' if count != 1 else ''} in label file:"]
        lines += [f"  - {m}" for m in shown]
        if count > len(shown):
            lines.append(f"  ... and {count - len(shown)} more")
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


def _json_lines_rows(raw: bytes, log: _ErrorLog, base_offset: int = 0) -> Iterator[tuple[str, Any]]:
    """Yield (location, parsed object) per non-blank line; decoding/parse errors are logged."""
    offset = base_offset
    for number, line in enumerate(raw.split(b"\n"), start=1):
        start, offset = offset, offset + len(line) + 1
        where = f"line {number}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            log.add(where, _utf8_message(line[exc.start], start + exc.start))
            continue
        if not text.strip():
            continue
        try:
            yield where, json.loads(text)
        except json.JSONDecodeError as exc:
            log.add(where, f"malformed JSON: {exc.msg} at column {exc.colno}")


def _json_array_rows(text: str, log: _ErrorLog) -> Iterator[tuple[str, Any]]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        log.add(f"line {exc.lineno}", f"malformed JSON: {exc.msg} at column {exc.colno}")
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


def _csv_rows(text: str, aspects: Sequence[str], log: _ErrorLog) -> Iterator[tuple[str, Any]]:
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
    for column in ("id", "doc_id", "source", "output"):
        if column not in frame.columns:
            log.add("header", f"missing column '{column}'")
    if log.messages:
        return
    for number, cells in enumerate(frame.to_dict("records"), start=1):
        row: dict[str, Any] = {k: cells[k] for k in ("id", "doc_id", "source", "output")}
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
    path: Path, raw: bytes, aspects: Sequence[str], log: _ErrorLog
) -> Iterator[tuple[str, Any]]:
    suffix = path.suffix.lower()
    bom = len(_BOM) if raw.startswith(_BOM) else 0
    body = raw[bom:]
    if suffix in JSON_LINES_SUFFIXES and not (suffix == ".json" and body.lstrip()[:1] == b"["):
        yield from _json_lines_rows(body, log, base_offset=bom)
        return
    problems = _utf8_problems(body)
    for offset, line in problems:
        log.add(f"line {line}", _utf8_message(body[offset], bom + offset))
    if problems:
        return
    text = body.decode("utf-8")
    if suffix in CSV_SUFFIXES:
        yield from _csv_rows(text, aspects, log)
    else:
        yield from _json_array_rows(text, log)


def load_labels(
    path: str | Path,
    aspects: Sequence[str],
    score_range: ScoreRange | Mapping[str, ScoreRange],
) -> LabelledData:
    """Read and validate a JSONL / JSON-array / CSV label file.

    ``score_range`` is one inclusive ``(low, high)`` for every aspect, or a mapping from aspect
    to its range. Raises :class:`DataValidationError` listing every problem found.
    """
    return _load(Path(path), list(aspects), _normalise_ranges(aspects, score_range))


def load_texts(path: str | Path) -> LabelledData:
    """Read texts to score (rows as in a label file; ``scores`` optional and ignored)."""
    return _load(Path(path), [], {})


def _load(path: Path, aspects: list[str], ranges: dict[str, ScoreRange]) -> LabelledData:
    suffix = path.suffix.lower()
    if suffix not in JSON_LINES_SUFFIXES + CSV_SUFFIXES:
        raise DataValidationError(
            f"{path}: unsupported label file type {path.suffix!r}; use .jsonl, .json or .csv"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataValidationError(f"{path}: cannot read label file: {exc.strerror}") from exc
    log = _ErrorLog(path)
    if not raw.removeprefix(_BOM).strip():
        log.add("", "file is empty; expected at least one labelled row")
        log.raise_if_any()
    records: list[dict[str, Any]] = []
    first_seen: dict[str, str] = {}
    for where, parsed in _parsed_rows(path, raw, aspects, log):
        record, problems = _validate_row(parsed, aspects, ranges)
        row_id = _raw_id(parsed)
        for problem in problems:
            log.add(where, problem, row_id)
        if record is None:
            continue
        row_id = record["id"]
        if row_id in first_seen:
            message = f"field 'id': duplicate id {row_id!r}, first used at {first_seen[row_id]}"
            log.add(where, message, row_id)
            continue
        first_seen[row_id] = where
        records.append(record)
    if not records and not log.messages:
        log.add("", "file holds no labelled rows")
    log.raise_if_any()
    return _build(records, list(aspects))


def save_labels(data: LabelledData, path: str | Path) -> None:
    """Write ``data`` as a canonical JSONL label file (UTF-8, one row per line)."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for row in data.rows():
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- splits


def _documents(data: LabelledData) -> list[str]:
    """Distinct doc ids in first-appearance order."""
    return list(dict.fromkeys(data.samples["doc_id"]))


def _rows_of_documents(data: LabelledData, doc_ids: Iterable[str]) -> LabelledData:
    keep = data.samples["doc_id"].isin(set(doc_ids)).to_numpy()
    return data.subset(data.samples.index[keep])


def split_by_document(
    data: LabelledData, test_fraction: float, seed: int
) -> tuple[LabelledData, LabelledData]:
    """Split into (train, test) so that no document has rows on both sides.

    About ``test_fraction`` of the documents go to test; the same seed gives the same split.
    Row order within each part follows ``data``.
    """
    from sklearn.model_selection import GroupShuffleSplit

    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    if len(_documents(data)) < 2:
        raise ConfigError("split_by_document needs at least two documents")
    splitter = GroupShuffleSplit(n_splits=1, test_size=test_fraction, random_state=seed)
    groups = data.samples["doc_id"].to_numpy()
    train_idx, test_idx = next(splitter.split(np.zeros(len(data)), groups=groups))
    ids = data.samples.index
    train = data.subset(ids[np.sort(train_idx)])
    test = data.subset(ids[np.sort(test_idx)])
    overlap = set(train.samples["doc_id"]) & set(test.samples["doc_id"])
    if overlap:  # GroupShuffleSplit guarantees this; keep the guarantee explicit.
        raise AssertionError(f"documents on both sides of the split: {sorted(overlap)[:5]}")
    return train, test


def subsample_documents(data: LabelledData, n_docs: int | None, seed: int) -> LabelledData:
    """Keep every row of ``n_docs`` randomly chosen documents (``None`` keeps all)."""
    if n_docs is None:
        return data
    documents = _documents(data)
    if not 1 <= n_docs <= len(documents):
        raise ConfigError(f"n_docs must be between 1 and {len(documents)}, got {n_docs}")
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(documents), size=n_docs, replace=False)
    return _rows_of_documents(data, (documents[i] for i in chosen))


# --------------------------------------------------------------------------- merging


def merge_labels(base: LabelledData, new: LabelledData) -> LabelledData:
    """Add ``new`` labels to ``base``.

    Rows with a new id are appended; rows whose id is already in ``base`` get their scores
    replaced, and their texts (doc, system, source, output, references, wrong ending) must
    match exactly.
    """
    if set(base.aspects) != set(new.aspects):
        raise DataValidationError(
            f"cannot merge labels with different aspects: {base.aspects} vs {new.aspects}"
        )
    new_rows = {row["id"]: row for row in new.rows()}
    mismatched = []
    merged = []
    for row in base.rows():
        update = new_rows.pop(row["id"], None)
        if update is not None:
            changed = [c for c in SAMPLE_COLUMNS + OPTIONAL_COLUMNS if row.get(c) != update.get(c)]
            if changed:
                mismatched.append(f"id {row['id']!r}: {', '.join(changed)} differ")
                continue
            row["scores"] = update["scores"]
        merged.append(row)
    if mismatched:
        shown = mismatched[:MAX_REPORTED_ERRORS]
        more = len(mismatched) - len(shown)
        raise DataValidationError(
            "new labels change the texts of existing rows (texts must match exactly):\n"
            + "\n".join(f"  - {m}" for m in shown)
            + (f"\n  ... and {more} more" if more else "")
        )
    merged.extend(new_rows.values())
    return _build(merged, base.aspects)
