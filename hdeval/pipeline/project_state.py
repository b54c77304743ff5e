"""Which stages ``dvc repro`` would re-run in a project, as DVC itself reports it, and whether a
finished one's declared outs are there to read.

DVC's status lists the stages whose own deps, params or outs changed; ``dvc repro`` then also
re-runs every stage downstream of one it re-runs. A stage that runs every time
(``always_changed``) re-runs, but re-runs what follows only when its outs would change: the
caller says which of them would write the same outs again (the label manifest, when no label
file changed).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from hdeval import workspace as ws
from hdeval.errors import HDEvalError
from hdeval.pipeline.runner import stage_commands

ALWAYS = "always changed"


@dataclass(frozen=True)
class ProjectState:
    """A project directory and the stages a ``dvc repro`` there would run (``rerun``; None:
    every stage, with ``why``)."""

    root: Path
    rerun: tuple[str, ...] | None
    why: str = ""

    def reruns(self, stage: str) -> bool:
        return self.rerun is None or stage in self.rerun

    def finished(self, stage: str, outs: Sequence[str]) -> bool:
        """Whether ``dvc repro`` would skip ``stage`` and every out it declares (``outs``) is
        there to read."""
        return not self.reruns(stage) and all((self.root / out).exists() for out in outs)


def every_stage(root: Path, why: str) -> ProjectState:
    return ProjectState(root, None, why)


def dvc_state(root: Path, settled: Set[str] = frozenset()) -> ProjectState:
    """What ``dvc repro`` in ``root`` would re-run: DVC's status, and everything downstream of
    a stage it re-runs, except after a stage in ``settled`` (one that runs every time but would
    write the same outs)."""
    if not (root / "dvc.yaml").is_file() or not (root / ".dvc").is_dir():
        return every_stage(root, f"{root} is not a DVC project: every stage counted")
    try:
        import networkx as nx  # DVC's own dependency
        from dvc.repo import Repo
    except ImportError:
        return every_stage(root, "DVC is not installed (hdeval[pipeline]): every stage counted")
    try:
        with Repo(str(root)) as repo:
            status = repo.status()
            graph = repo.index.graph
    except Exception as exc:
        raise HDEvalError(
            f"DVC could not report which stages of {root} would re-run: {exc}; "
            "run `dvc status` there to see why"
        ) from exc
    stages = {stage.addressing: stage for stage in graph}  # addressed from the cwd
    rerun: set[str] = set()
    for address, changes in status.items():
        stage = stages.get(address)
        if stage is None:
            continue
        rerun.add(stage.name)
        if stage.name in settled and changes == [ALWAYS]:
            continue
        rerun |= {s.name for s in nx.ancestors(graph, stage)}  # edges point to what it reads
    order = [stage.name for stage in stage_commands(root)]
    ordered = [name for name in order if name in rerun] + sorted(rerun - set(order))
    return ProjectState(root, tuple(ordered))


def labels_settled(root: Path, label_files: Sequence[Path]) -> set[str]:
    """``{"labels"}`` when the label manifest stage would write what it wrote last time: the
    same files (as params name them) with the same sha256."""
    manifest = root / ws.LABELS
    if not manifest.is_file():
        return set()
    try:
        now = ws.label_manifest([root / p for p in label_files])["files"]
    except HDEvalError:  # a label file is missing: the stage will say so
        return set()
    recorded = ws.read_json(manifest).get("files", [])
    same = [str(p) for p in label_files] == [f["path"] for f in recorded] and [
        f["sha256"] for f in now
    ] == [f["sha256"] for f in recorded]
    return {"labels"} if same else set()
