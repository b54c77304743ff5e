"""Stage prepare: validate the label files, keep ``n_docs`` documents, split by document, thin
the training documents to ``train_texts_per_doc`` texts each."""

from hdeval import workspace as ws
from hdeval.data import save_labels
from hdeval.data.splitting import load_split
from hdeval.params import load_params


def main() -> None:
    params = load_params(ws.PARAMS)
    train, test = load_split(params.data)
    out = ws.fresh(ws.PREPARED)
    save_labels(train, out / "train.jsonl")
    save_labels(test, out / "test.jsonl")
    ws.write_json(
        out / "split.json",
        {
            "train_rows": len(train),
            "test_rows": len(test),
            "train_documents": sorted(set(train.samples["doc_id"])),
            "test_documents": sorted(set(test.samples["doc_id"])),
        },
    )
    print(f"prepared {len(train)} train and {len(test)} test rows")


if __name__ == "__main__":
    ws.run_stage("prepare", main)
