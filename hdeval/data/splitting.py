"""Document- and text-level subsampling, train/test splits and merging of new label files."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from pathlib import Path

import numpy as np

from hdeval.data.reading import load_labels
from hdeval.data.table import OPTIONAL_COLUMNS, SAMPLE_COLUMNS, LabelledData, _build
from hdeval.data.validation import MAX_REPORTED_ERRORS
from hdeval.errors import ConfigError, DataValidationError
from hdeval.params import DataParams

# --------------------------------------------------------------------------- splits


def _documents(data: LabelledData) -> list[str]:
    """Distinct doc ids in first-appearance order."""
    return list(dict.fromkeys(data.samples["doc_id"]))


def _among(documents: list[str], among: Collection[str] | None) -> list[str]:
    """Those of ``documents`` in ``among`` (all where it is None), in their order."""
    if among is None:
        return documents
    known = set(among)
    return [d for d in documents if d in known]


def _rows_of_documents(data: LabelledData, doc_ids: Iterable[str]) -> LabelledData:
    keep = data.samples["doc_id"].isin(set(doc_ids)).to_numpy()
    return data.subset(data.samples.index[keep])


def split_by_document(
    data: LabelledData, test_fraction: float, seed: int, among: Collection[str] | None = None
) -> tuple[LabelledData, LabelledData]:
    """Split into (train, test) so that no document has rows on both sides.

    About ``test_fraction`` of the documents go to test; the same seed gives the same split.
    Row order within each part follows ``data``. ``among``: the documents shuffled into the
    two sides (the label file's); any other document (one a new label file brings) goes to test
    where :func:`_draw` of its id falls below ``test_fraction``, so adding documents never moves
    one split before.
    """
    from sklearn.model_selection import GroupShuffleSplit

    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    documents = _documents(data)
    shuffled = _among(documents, among)
    if len(shuffled) < 2:
        raise ConfigError("split_by_document needs at least two documents")
    settled = _rows_of_documents(data, shuffled)
    splitter = GroupShuffleSplit(n_splits=1, test_size=test_fraction, random_state=seed)
    groups = settled.samples["doc_id"].to_numpy()
    _, test_idx = next(splitter.split(np.zeros(len(settled)), groups=groups))
    held_out = set(settled.samples["doc_id"].iloc[test_idx])
    joined = set(documents) - set(shuffled)
    held_out |= {d for d in joined if _draw(d, seed) < test_fraction}
    in_test = data.samples["doc_id"].isin(held_out).to_numpy()
    ids = data.samples.index
    train, test = data.subset(ids[~in_test]), data.subset(ids[in_test])
    overlap = set(train.samples["doc_id"]) & set(test.samples["doc_id"])
    if overlap:  # GroupShuffleSplit guarantees this; keep the guarantee explicit.
        raise AssertionError(f"documents on both sides of the split: {sorted(overlap)[:5]}")
    return train, test


def _draw(doc_id: str, seed: int) -> float:
    """A number in [0, 1) fixed by ``seed`` and ``doc_id`` alone."""
    digest = hashlib.sha256(f"{seed}:{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def subsample_documents(
    data: LabelledData,
    n_docs: int | None,
    seed: int,
    where: str = "n_docs",
    among: Collection[str] | None = None,
) -> LabelledData:
    """Keep every row of ``n_docs`` randomly chosen documents (``None`` keeps all).

    ``where`` names the setting and the label files in an error (``data.n_docs in
    params.yaml; labels: ...``). ``among``: the documents to choose from (the label file's);
    every other one (a new label file's) is kept.
    """
    if n_docs is None:
        return data
    documents = _documents(data)
    pool = _among(documents, among)
    if not 1 <= n_docs <= len(pool):
        besides = "" if len(pool) == len(documents) else " besides the new label files' (all used)"
        raise ConfigError(
            f"{where}: {n_docs} documents asked for, the labels hold {len(pool)}{besides}; "
            f"use 1 to {len(pool)}, or null for all"
        )
    rng = np.random.default_rng(seed)
    chosen = {pool[i] for i in rng.choice(len(pool), size=n_docs, replace=False)}
    return _rows_of_documents(data, chosen | (set(documents) - set(pool)))


def restrict_documents(
    data: LabelledData, documents: list[str] | None, where: str = "data.documents"
) -> LabelledData:
    """The rows of ``documents`` only (all where it is None); an id ``data`` does not hold is an
    error naming it and ``where``."""
    if documents is None:
        return data
    held = set(_documents(data))
    unknown = [d for d in documents if d not in held]
    if unknown:
        shown = ", ".join(map(repr, unknown[:MAX_REPORTED_ERRORS]))
        more = len(unknown) - MAX_REPORTED_ERRORS
        rest = f" and {more} more" if more > 0 else ""
        raise ConfigError(f"{where}: the labels hold no document {shown}{rest}")
    return _rows_of_documents(data, documents)


def subsample_texts(data: LabelledData, per_doc: int | None, seed: int) -> LabelledData:
    """Keep at most ``per_doc`` randomly chosen rows of each document (``None`` keeps all).

    Row order follows ``data``; the same seed keeps the same rows.
    """
    if per_doc is None:
        return data
    rng = np.random.default_rng(seed)
    keep = []
    for _, rows in data.samples.groupby("doc_id", sort=False):
        chosen = rng.choice(len(rows), size=min(per_doc, len(rows)), replace=False)
        keep.extend(rows.index[np.sort(chosen)])
    return data.subset(data.samples.index[data.samples.index.isin(keep)])


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


def _listed(config: DataParams) -> str:
    return f"data.documents ({config.documents}, labels: {config.path})"


def load_run_labels(config: DataParams) -> LabelledData:
    """Every row of ``data.path`` in the run's documents (``data.documents``), without the
    subsample and split of :func:`load_split`: where DHP draws reference texts from."""
    data = load_labels(
        config.path, config.aspects, config.score_range, config.max_field_chars,
        config.invalid_unicode,
    )  # fmt: skip
    return restrict_documents(data, config.document_ids(), _listed(config))


def load_split(
    config: DataParams, params_file: str = "params.yaml"
) -> tuple[LabelledData, LabelledData]:
    """Labels (plus any new label files), subsampled by document, split by document.

    ``params_file`` names where ``config`` came from, in errors.
    """

    def load(path: Path) -> LabelledData:
        return load_labels(
            path, config.aspects, config.score_range, config.max_field_chars, config.invalid_unicode
        )

    data = restrict_documents(load(config.path), config.document_ids(), _listed(config))
    first = _documents(data)  # drawn from and split as ever; new label files' documents join
    for extra in config.new_labels:
        data = merge_labels(data, load(extra))
    files = ", ".join(map(str, [config.path, *config.new_labels]))
    where = f"data.n_docs in {params_file} (labels: {files})"
    data = subsample_documents(data, config.n_docs, config.seed, where, among=first)
    train, test = split_by_document(data, config.test_fraction, config.seed, among=first)
    return subsample_texts(train, config.train_texts_per_doc, config.seed), test
