"""Every stage of the pipeline, in the order they run: dvc.yaml lists them so (a test checks
it against these objects), ``hdeval estimate`` sums their plans."""

from __future__ import annotations

from hdeval.pipeline.stages import (
    acceptance,
    baselines,
    dhp,
    evaluate,
    explain,
    labels,
    layer,
    prepare,
    report,
    train,
)
from hdeval.pipeline.stages.base import Stage

STAGES: tuple[Stage, ...] = tuple(
    module.STAGE
    for module in (
        labels, prepare, layer, evaluate, train, explain, baselines, dhp, acceptance, report,
    )
)  # fmt: skip


def stage(name: str) -> Stage:
    """The stage called ``name`` (``layer@2``: the layer stage)."""
    kind = name.partition("@")[0]
    for found in STAGES:
        if found.name == kind:
            return found
    raise KeyError(name)
