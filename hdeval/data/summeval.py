"""Public evaluation datasets converted to the canonical label schema (see ``hdeval.data``)."""

from __future__ import annotations

import json
from pathlib import Path

from hdeval.data.reading import load_labels
from hdeval.data.table import LabelledData

SUMMEVAL_ASPECTS: tuple[str, ...] = ("coherence", "consistency", "fluency", "relevance")
SUMMEVAL_SCORE_RANGE: tuple[float, float] = (1.0, 5.0)


#: The shipped label file and the 80 documents runs, tests and benchmarks may read
#: (the other 20 are kept unseen for an acceptance review: data/summeval/README.md).
SUMMEVAL_FILE = Path("data/summeval/summeval.jsonl")
DEVELOPMENT_DOCUMENTS = Path("data/summeval/development_documents.txt")


def development_rows(root: Path = Path()) -> list[dict]:
    """Every row of the shipped SummEval file whose document is a development document, in file
    order (``root``: the project folder)."""
    listed = set((root / DEVELOPMENT_DOCUMENTS).read_text(encoding="utf-8").split())
    with open(root / SUMMEVAL_FILE, encoding="utf-8") as handle:
        return [row for line in handle if (row := json.loads(line))["doc_id"] in listed]


def summeval_row(raw: dict) -> dict:
    """One SummEval row (doc_id, system_id, source, system_output, references, scores)
    in the canonical label schema; scores are copied unchanged."""
    return {
        "id": f"{raw['doc_id']}#{raw['system_id']}",
        "doc_id": raw["doc_id"],
        "system_id": raw["system_id"],
        "source": raw["source"],
        "output": raw["system_output"],
        "references": list(raw["references"]),
        "scores": {aspect: raw["scores"][aspect] for aspect in SUMMEVAL_ASPECTS},
    }


def convert_summeval(src: str | Path, dst: str | Path) -> int:
    """Convert a SummEval JSONL file to canonical JSONL, keeping row order; return the row count."""
    count = 0
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    with open(src, encoding="utf-8") as fin, open(dst, "w", encoding="utf-8", newline="\n") as fout:
        for line in fin:
            if not line.strip():
                continue
            fout.write(json.dumps(summeval_row(json.loads(line)), ensure_ascii=False) + "\n")
            count += 1
    return count


def load_summeval(path: str | Path) -> LabelledData:
    """Load a canonical SummEval file with its four aspects on the 1-5 scale."""
    return load_labels(path, SUMMEVAL_ASPECTS, SUMMEVAL_SCORE_RANGE)
