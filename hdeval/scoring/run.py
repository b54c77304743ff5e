"""What scoring texts takes and gives: a :class:`Sample` to score, and a :class:`ScoringRun`
holding every sample's feature values with what the run cost and what failed. numpy only
(pandas is imported when a caller asks for a DataFrame)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hdeval.params import Mode


@dataclass(frozen=True)
class Sample:
    """One text to score, with the source it was written from."""

    id: str
    doc_id: str
    source: str
    output: str
    references: tuple[str, ...] = ()


def samples_of(table: Any) -> list[Sample]:
    """Samples from a list of :class:`Sample` or a table indexed by id (doc_id, source, output,
    and references where it has them)."""
    if isinstance(table, Sequence) and not isinstance(table, str):
        return list(table)
    refs = table["references"] if "references" in table.columns else None
    rows = table[["doc_id", "source", "output"]].itertuples(index=True, name=None)
    return [
        Sample(str(i), str(d), str(s), str(o), _references(refs, i) if refs is not None else ())
        for i, d, s, o in rows
    ]


def _references(column: Any, index: Any) -> tuple[str, ...]:
    value = column[index]
    if isinstance(value, str):
        return (value,)
    if value is None or (isinstance(value, float) and value != value):
        return ()
    return tuple(str(r) for r in value)


@dataclass(frozen=True)
class ScoringFailure:
    sample_id: str
    column: str
    reason: str


@dataclass(frozen=True)
class Truncation:
    """A sample whose prompts (of one scoring mode) were cut to fit the judge's context."""

    sample_id: str
    mode: Mode
    source_tokens_cut: int
    text_tokens_cut: int


@dataclass
class ScoringRun:
    """Features of every sample (``values``: one row per id, one column per name), and cost."""

    ids: list[str]
    columns: list[str]
    values: np.ndarray
    failures: list[ScoringFailure] = field(default_factory=list)
    computed: int = 0
    cached: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def features(self):
        """The feature table as a pandas DataFrame indexed by sample id."""
        import pandas as pd

        return pd.DataFrame(self.values, index=pd.Index(self.ids), columns=self.columns)

    @property
    def truncated_samples(self) -> int:
        """Number of samples with at least one prompt cut to fit the judge's context."""
        return len({t.sample_id for t in self.truncations})

    def summary(self) -> str:
        total = self.computed + self.cached
        rate = self.cached / total if total else 1.0
        return (
            f"{_count(len(self.ids), 'sample')} x {_count(len(self.columns), 'feature')}: "
            f"{self.computed} LLM scores computed, {self.cached} from cache "
            f"({rate:.0%} hit rate), {len(self.failures)} failed, "
            f"{self.truncated_samples} samples truncated to the judge's context"
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
