"""DHP's originals, one text per drawn document, that the perturbations degrade: its first
reference (:func:`reference_samples`), or its best-rated text where the scorer reads the
references (:func:`best_rated_samples`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hdeval.data import OPTIONAL_COLUMNS, LabelledData
from hdeval.dhp.text import detokenize
from hdeval.errors import ConfigError


def reference_samples(
    data: LabelledData, n: int | None, seed: int, detokenise: bool = True
) -> pd.DataFrame:
    """One row per document whose ``output`` is the document's first reference (DHP's originals).

    ``n`` documents with at least one reference are drawn with ``seed`` (all when None) and kept
    in data order. The row id is the doc id, ``system_id`` is "reference" and ``references``
    holds the *other* references, so a reference-based metric is not handed the text itself;
    optional columns (a story's ``wrong_ending``) come from the document's first row.
    ``detokenise`` undoes SummEval's word tokenisation ("Spurs 's draw ." -> "Spurs's draw."),
    as an LLM perturber returns natural text and the two must not differ in that alone.
    """
    first = _drawn_documents(data, n, seed)
    refs = first["references"]
    return _originals(
        first, "reference", refs.map(lambda r: r[0]), refs.map(lambda r: list(r[1:])), detokenise
    )


def best_rated_samples(
    data: LabelledData, n: int | None, seed: int, detokenise: bool = True
) -> pd.DataFrame:
    """One row per document whose ``output`` is its best-rated text, with every reference.

    For a scorer that reads the references (a bundle trained with the references family) a
    reference cannot be the original: it would be scored against itself, or with none where a
    document has one. The same documents as :func:`reference_samples` are drawn; a document's
    best-rated text has the highest mean percentile rank over the aspects (ties: data order).
    """
    drawn = set(_drawn_documents(data, n, seed)["doc_id"])
    rank = data.targets.rank(pct=True).mean(axis=1)
    samples = data.samples[data.samples["doc_id"].isin(drawn)]
    best = rank.loc[samples.index].groupby(samples["doc_id"], sort=False).idxmax()
    chosen = samples.loc[best.to_numpy()]
    refs = chosen["references"].map(list)
    return _originals(chosen, chosen["system_id"], chosen["output"], refs, detokenise)


def _drawn_documents(data: LabelledData, n: int | None, seed: int) -> pd.DataFrame:
    """The first row of ``n`` documents with a reference, drawn with ``seed``, in data order."""
    first = data.samples.drop_duplicates("doc_id", keep="first")
    first = first[first["references"].map(lambda refs: len(refs) > 0)]
    if n is not None:
        if not 1 <= n <= len(first):
            raise ConfigError(f"n must be between 1 and {len(first)} documents, got {n}")
        chosen = np.random.default_rng(seed).choice(len(first), size=n, replace=False)
        first = first.iloc[np.sort(chosen)]
    return first


def _originals(
    chosen: pd.DataFrame,
    system_id: str | pd.Series,
    output: pd.Series,
    references: pd.Series,
    detokenise: bool,
) -> pd.DataFrame:
    """DHP's originals, one per document of ``chosen`` (a row each), indexed by doc id; optional
    columns (a story's ``wrong_ending``) come from the chosen row."""
    optional = [c for c in OPTIONAL_COLUMNS if c in chosen.columns]
    columns = {
        "doc_id": chosen["doc_id"],
        "system_id": system_id,
        "source": chosen["source"],
        "output": output.map(detokenize) if detokenise else output,
        "references": references,
        **{c: chosen[c] for c in optional},
    }
    table = pd.DataFrame(columns, index=chosen.index, dtype=object)
    table.index = pd.Index([str(d) for d in table["doc_id"]], dtype=object, name="id")
    return table
