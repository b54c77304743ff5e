"""Sections ``data`` and ``task``: the human labels, their split, and the words the judge reads."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from hdeval.errors import ConfigError
from hdeval.params.base import Section


class TaskSpec(Section):
    """What is being evaluated, in words the judge reads."""

    description: str = (
        "text summarization. A summary is a shorter passage that covers the key details of the "
        "original article"
    )
    """The task, as the criteria writer and the source-free likelihood read it."""
    source_label: str = "News article"
    """Heading of the source in every prompt."""
    output_label: str = "Summary"
    """Heading of the text under evaluation in every prompt."""
    output_noun: str = "summary"
    """What a text is called in the instructions."""
    source_noun: str = "news article"
    """What a source is called in the instructions."""


class DataParams(Section):
    """Which human labels, which documents, and how they are split (by document)."""

    path: Path = Path("data/summeval/summeval.jsonl")
    """The label file: JSONL, JSON array or CSV rows (docs/data.md)."""
    new_labels: list[Path] = Field(default_factory=list)
    """More label files: new rows, or new scores for ids already labelled. A document they bring
    is always used, whatever ``n_docs``, and no document split before changes side: a new one
    is held out with probability ``test_fraction``, fixed by ``seed`` and its id."""
    aspects: list[str] = Field(
        default_factory=lambda: ["coherence", "consistency", "fluency", "relevance"]
    )
    """The human aspects to learn; each is a layer-1 criterion of ``criteria``."""
    score_range: tuple[float, float] | dict[str, tuple[float, float]] = (1.0, 5.0)
    """The human scale: one ``[low, high]`` for every aspect, or ``{aspect: [low, high]}``
    where aspects are rated on different scales; a score outside it is an error."""
    criteria: Path = Path("data/summeval/aspects.yaml")
    """Layer 1 of the criteria tree: the aspects and their definitions."""
    documents: Path | None = None
    """A file of document ids, one per line: only these documents of ``path`` are read any
    further (``n_docs`` draws among them; ``new_labels`` documents are always used); null: every
    document. An id the labels do not hold is an error naming it."""
    n_docs: int | None = Field(30, ge=2)
    """Documents used (every text of each), drawn among ``documents``; null uses all."""
    test_fraction: float = Field(0.33, gt=0, lt=1)
    """Share of the documents the criteria tree never sees: the tree is grown on the others
    (the development share). Every document is cross-fitted (``evaluate.folds``) all the same."""
    train_texts_per_doc: int | None = Field(None, ge=1)
    """At most this many randomly chosen texts per training document; null keeps all
    (held-out documents always keep every text)."""
    seed: int = 0
    """Seed of the document sample and the split."""
    max_field_chars: int = Field(1_000_000, ge=1)
    """Longest text field (source, output, reference...) a row may hold; longer is an error."""
    invalid_unicode: Literal["refuse", "replace"] = "refuse"
    """Text holding invalid Unicode (a lone surrogate such as JSON's ``\\ud83d``: a text cut
    inside an emoji): refuse names the row and field; replace puts U+FFFD in its place and names
    the rows in a warning (``hdeval score`` marks them in ``unicode_replaced``)."""

    @model_validator(mode="after")
    def _check_ranges(self) -> DataParams:
        self.ranges()
        return self

    def document_ids(self) -> list[str] | None:
        """The ids ``documents`` lists, in file order (None where it is null); a missing file
        is an error naming the setting."""
        if self.documents is None:
            return None
        if not self.documents.is_file():
            raise ConfigError(f"data.documents: no file {self.documents}")
        ids = [line.strip() for line in self.documents.read_text(encoding="utf-8").splitlines()]
        ids = [i for i in ids if i and not i.startswith("#")]
        if not ids:
            raise ConfigError(f"data.documents: {self.documents} lists no document id")
        return list(dict.fromkeys(ids))

    def label_files(self) -> list[Path]:
        """Every label file these params name: ``path``, then ``new_labels``."""
        return [self.path, *self.new_labels]

    def input_files(self) -> list[Path]:
        """The label files, then the ``documents`` list where there is one: every file whose
        content decides the run's rows."""
        return self.label_files() + ([self.documents] if self.documents is not None else [])

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Each aspect's inclusive (low, high) human scale: ``score_range`` is one pair for every
        aspect, or a mapping aspect -> pair that must cover every aspect in ``aspects``."""
        given = self.score_range
        if isinstance(given, dict):
            missing = [a for a in self.aspects if a not in given]
            if missing:
                raise ValueError(f"score_range has no range for aspects {missing}")
            ranges = {a: given[a] for a in self.aspects}
        else:
            ranges = dict.fromkeys(self.aspects, given)
        for aspect, (low, high) in ranges.items():
            if not low < high:
                raise ValueError(f"score_range of {aspect!r} must be [low, high] with low < high")
        return ranges
