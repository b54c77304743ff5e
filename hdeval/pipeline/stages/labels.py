"""Stage labels: a manifest of the sha256 of every label file params name (and of the
``data.documents`` list), and of the published peer's predictions (``evaluate.peer``).

DVC cannot make a list param (``data.new_labels``) or an optional file into deps, so this stage
runs on every ``dvc repro`` (``always_changed``) and rewrites ``work/labels.json`` and
``work/peer.json``; ``prepare`` and ``baselines`` depend on them, so they re-run exactly when a
label or peer file was added, removed or edited, wherever it lives.
"""

from __future__ import annotations

from hdeval import workspace as ws
from hdeval.params import Params
from hdeval.pipeline.stages.base import Out, Stage


def run(params: Params) -> None:
    data, peer = params.data, params.evaluate.peer
    manifest = ws.label_manifest(data.input_files())
    ws.LABELS.parent.mkdir(parents=True, exist_ok=True)
    ws.write_json(ws.LABELS, manifest)
    found = peer is not None and peer.path.is_file()
    ws.write_json(ws.PEER, ws.label_manifest([peer.path]) if found else {"files": []})
    print(f"label files: {len(manifest['files'])}, peer files: {int(found)}")


STAGE = Stage(
    "labels",
    run,
    outs=(Out(str(ws.LABELS), cache=False), Out(str(ws.PEER), cache=False)),
    params=("data.path", "data.new_labels", "evaluate.peer"),
    always_changed=True,
)
