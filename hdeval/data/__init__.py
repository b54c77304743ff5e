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

from hdeval.data.reading import load_labels, load_texts, save_labels
from hdeval.data.splitting import merge_labels, split_by_document, subsample_documents
from hdeval.data.table import OPTIONAL_COLUMNS, SAMPLE_COLUMNS, WRONG_ENDING, LabelledData

__all__ = [
    "OPTIONAL_COLUMNS",
    "SAMPLE_COLUMNS",
    "WRONG_ENDING",
    "LabelledData",
    "load_labels",
    "load_texts",
    "merge_labels",
    "save_labels",
    "split_by_document",
    "subsample_documents",
]
