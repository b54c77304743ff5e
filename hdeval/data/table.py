"""The labelled-data container: samples, human scores per aspect, and a content fingerprint."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

MAX_REPORTED_ERRORS = 20
SAMPLE_COLUMNS: tuple[str, ...] = ("doc_id", "system_id", "source", "output", "references")
#: A known-wrong alternative to a document's reference (DHP's story task swaps it in).
WRONG_ENDING = "wrong_ending"
#: Sample columns present only when some row of the file gives them.
OPTIONAL_COLUMNS: tuple[str, ...] = (WRONG_ENDING,)

ScoreRange = tuple[float, float]


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
    #: Row id -> the fields whose invalid Unicode was replaced with U+FFFD when the file was
    #: read (``data.invalid_unicode: replace``).
    replaced: Mapping[str, list[str]] = field(default_factory=dict)

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
        marks = {i: self.replaced[i] for i in wanted if i in self.replaced}
        return LabelledData(self.samples.loc[wanted].copy(), self.targets.loc[wanted].copy(), marks)

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
