"""Reading ``hdeval score``'s output rows for a system comparison, refusing what cannot be
compared with one line naming the file, the line and the field."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hdeval.errors import DataValidationError


@dataclass(frozen=True)
class ScoredRows:
    """Scored texts, one row per text: ``doc_id``, ``system_id``, and per aspect its score
    (``score:<aspect>``, NaN where it failed) and the half width of its prediction interval
    (``width:<aspect>``, NaN without intervals). ``level`` is the intervals' coverage (None: the
    rows carry none); ``documents`` the documents every system was scored on; ``system_sd``
    the bundle's error of a system's mean per aspect (absent: the rows carry none)."""

    table: pd.DataFrame
    aspects: list[str]
    level: float | None
    documents: list[str]
    system_sd: dict[str, float] = field(default_factory=dict)

    @property
    def systems(self) -> list[str]:
        """The systems, in the order they first appear."""
        return list(dict.fromkeys(self.table["system_id"]))

    def left_out(self) -> int:
        """Texts on documents not every system was scored on."""
        return int((~self.table["doc_id"].isin(self.documents)).sum())


def _text(row: dict, key: str) -> str | None:
    value = row.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return value if isinstance(value, str) and value.strip() else None


def _half_width(score: float | None, pair: object) -> float:
    """The half width of ``[low, high]`` around ``score`` (its larger side: the smaller one may
    be clipped at the scale's end); NaN without either."""
    if score is None or not isinstance(pair, list) or len(pair) != 2:
        return math.nan
    return max(float(pair[1]) - score, score - float(pair[0]))


def _record(path: Path, number: int, row: object, aspects: list[str] | None) -> dict:
    where = f"{path} line {number}"
    if not isinstance(row, dict):
        raise DataValidationError(f"{where} is not a JSON object: not a row of hdeval score")
    row_id = row.get("id")
    where += f" (id {row_id!r})"
    scores = row.get("scores")
    if not isinstance(scores, dict) or not scores:
        raise DataValidationError(f"{where}: no 'scores': not a row of hdeval score's output")
    system = _text(row, "system_id")
    if system is None:
        raise DataValidationError(
            f"{where}: no system_id; compare-systems groups texts by system: give every input "
            "row of hdeval score a system_id"
        )
    doc = _text(row, "doc_id")
    if doc is None:
        raise DataValidationError(
            f"{where}: no doc_id; systems are compared on the same documents: give every input "
            "row of hdeval score a doc_id"
        )
    if aspects is not None and sorted(scores) != sorted(aspects):
        raise DataValidationError(
            f"{where}: field 'scores' has aspects {sorted(scores)}, earlier rows {sorted(aspects)}:"
            " rows of two evaluators"
        )
    intervals = row.get("intervals") if isinstance(row.get("intervals"), dict) else {}
    record = {"id": str(row_id), "doc_id": doc, "system_id": system}
    for aspect, value in scores.items():
        if value is not None and not isinstance(value, (int, float)):
            raise DataValidationError(f"{where}: field 'scores.{aspect}' is not a number")
        record[f"score:{aspect}"] = math.nan if value is None else float(value)
        record[f"width:{aspect}"] = _half_width(value, intervals.get(aspect))
    return record


def _system_sd(path: Path, number: int, row: dict) -> dict[str, float]:
    """The row's ``system_error_sd``: aspect -> non-negative number (None: not measured)."""
    value = row.get("system_error_sd") or {}
    ok = isinstance(value, dict) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)
        for v in value.values()
    )
    if not ok:
        raise DataValidationError(
            f"{path} line {number} (id {row.get('id')!r}): field 'system_error_sd' is "
            f"{value!r}: an object of aspect -> non-negative number, as hdeval score writes"
        )
    return {str(k): float(v) for k, v in value.items() if v is not None}


def _same(path: Path, number: int, row: dict, key: str, first: tuple) -> None:
    """Refuse a row whose ``key`` differs from the first row's (``first``: its value, where)."""
    value = row.get(key)
    value = value.get("card_sha256") if key == "bundle" and isinstance(value, dict) else value
    if value != first[0]:
        what = {"bundle": "bundle (card sha256)", "interval_level": "interval level"}[key]
        raise DataValidationError(
            f"{path} line {number} (id {row.get('id')!r}): field '{key}': scored with {what} "
            f"{value!r}, {first[1]} with {first[0]!r}: compare systems scored by one evaluator"
        )


def read_scored(paths: Sequence[Path]) -> ScoredRows:
    """The rows of ``hdeval score`` output files (JSON Lines), checked to be comparable: each
    has a ``system_id`` and a ``doc_id``, one bundle scored them all, no id repeats, there are
    two systems or more and they share a document."""
    records: list[dict] = []
    aspects: list[str] | None = None
    first: dict[str, tuple] = {}
    seen: dict[str, str] = {}
    for path in paths:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DataValidationError(f"{path}: cannot read scored rows: {exc}") from exc
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise DataValidationError(f"{path} line {number} is not JSON") from None
            record = _record(Path(path), number, row, aspects)
            if not records:  # one bundle scored every row (checked below): one error model
                system_sd = _system_sd(Path(path), number, row)
            aspects = aspects or [k.removeprefix("score:") for k in record if k[:6] == "score:"]
            for key in ("bundle", "interval_level"):
                if key not in first:
                    value = row.get(key)
                    value = value.get("card_sha256") if isinstance(value, dict) else value
                    first[key] = (value, f"{path} line {number}")
                _same(Path(path), number, row, key, first[key])
            if record["id"] in seen:
                raise DataValidationError(
                    f"{path} line {number}: duplicate id {record['id']!r}, first at "
                    f"{seen[record['id']]}"
                )
            seen[record["id"]] = f"{path} line {number}"
            records.append(record)
    if not records:
        raise DataValidationError(f"{', '.join(map(str, paths))}: no scored rows")
    table = pd.DataFrame(records)
    systems = list(dict.fromkeys(table["system_id"]))
    if len(systems) < 2:
        raise DataValidationError(
            f"{', '.join(map(str, paths))}: every row is of system {systems[0]!r}; "
            "compare-systems compares two systems or more"
        )
    documents = _shared_documents(table, systems)
    level = first["interval_level"][0]
    level = None if level is None else float(level)
    return ScoredRows(table, aspects or [], level, documents, system_sd)


def _shared_documents(table: pd.DataFrame, systems: list[str]) -> list[str]:
    """The documents every system was scored on, in order; none is an error."""
    per_system = table.groupby("system_id", sort=False)["doc_id"].agg(set)
    shared = set.intersection(*per_system.to_list())
    if not shared:
        counts = ", ".join(f"{s}: {len(per_system[s])}" for s in systems[:6])
        raise DataValidationError(
            f"no document is scored for every system (documents per system: {counts}); "
            "systems are compared on the documents they share: score them on the same ones"
        )
    return [d for d in dict.fromkeys(table["doc_id"]) if d in shared]


def document_means(rows: ScoredRows, aspect: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per shared document (rows) and system (columns) the mean ``aspect`` score of its texts,
    and the standard error the evaluator's error gives that mean, as half widths in score
    units (NaN without intervals); documents where a system has no score are left out."""
    shared = rows.table[rows.table["doc_id"].isin(rows.documents)]
    scored = shared.dropna(subset=[f"score:{aspect}"])
    grouped = scored.groupby(["doc_id", "system_id"], sort=False)
    means = grouped[f"score:{aspect}"].mean().unstack("system_id")
    # the mean of k texts' errors: sqrt(sum of squares) / k of their half widths
    widths = (
        grouped[f"width:{aspect}"]
        .agg(lambda w: float(np.sqrt(np.sum(np.square(w)))) / len(w))
        .unstack("system_id")
    )
    means = means.reindex(columns=rows.systems).dropna()
    widths = widths.reindex(index=means.index, columns=rows.systems)
    return means.to_numpy(float), widths.to_numpy(float), [str(d) for d in means.index]
