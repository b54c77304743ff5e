"""Stage labels: a manifest of the sha256 of every label file params name.

DVC cannot make a list param (``data.new_labels``) into deps, so this stage runs on every
``dvc repro`` (``always_changed``) and rewrites ``work/labels.json``; ``prepare`` depends on that
file, so it re-runs exactly when a label file was added, removed or edited, wherever it lives.
"""

from hdeval import workspace as ws
from hdeval.params import load_params


def main() -> None:
    data = load_params(ws.PARAMS).data
    manifest = ws.label_manifest(data.label_files())
    ws.LABELS.parent.mkdir(parents=True, exist_ok=True)
    ws.write_json(ws.LABELS, manifest)
    print(f"label files: {len(manifest['files'])}")


if __name__ == "__main__":
    ws.run_stage("labels", main)
