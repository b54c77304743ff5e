"""Stage prepare: validate the label files, keep the run's documents (``data.documents``,
``n_docs``), split off the development share the criteria tree is grown on (thinned to
``train_texts_per_doc`` texts a document), and write every row the run cross-fits."""

from __future__ import annotations

from hdeval import workspace as ws
from hdeval.data import merge_labels, save_labels
from hdeval.data.splitting import load_split
from hdeval.params import Params
from hdeval.pipeline.stages.base import Out, Stage


def run(params: Params) -> None:
    train, test = load_split(params.data)
    out = ws.fresh(ws.PREPARED)
    save_labels(train, out / "train.jsonl")
    save_labels(test, out / "test.jsonl")
    save_labels(merge_labels(train, test), ws.ROWS)
    ws.write_json(
        out / "split.json",
        {
            "train_rows": len(train),
            "test_rows": len(test),
            "train_documents": sorted(set(train.samples["doc_id"])),
            "test_documents": sorted(set(test.samples["doc_id"])),
        },
    )
    print(
        f"prepared {len(train) + len(test)} rows: the tree grows on {len(train)}, "
        f"{len(test)} are of documents it never sees"
    )


STAGE = Stage(
    "prepare",
    run,
    deps=(str(ws.LABELS),),
    outs=(Out(str(ws.PREPARED)),),
    params=("data",),
)
