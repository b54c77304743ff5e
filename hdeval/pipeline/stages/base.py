"""A pipeline stage as one object: the paths it reads and writes, the params keys it reads,
its run, and the LLM work it plans for ``hdeval estimate``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hdeval import workspace as ws
from hdeval.params import load_params

if TYPE_CHECKING:  # the estimate's types: a stage's run does not import them
    from hdeval.pipeline.scenario import Scenario

#: In a stage's deps: the outs of every layer (``hierarchy.layers`` of them).
EVERY_LAYER = "work/layers/${every}"
#: In a stage's deps: the final layer's outs (``work/layers/<hierarchy.layers>``).
FINAL_LAYER = "work/layers/${final}"


@dataclass(frozen=True)
class Out:
    """An out of a stage: ``cache`` False keeps it out of DVC's cache (it is committed or
    rewritten every run), ``persist`` keeps it between runs."""

    path: str
    cache: bool = True
    persist: bool = False


@dataclass(frozen=True)
class Stage:
    """One stage of dvc.yaml. ``run(params, *args)`` does its work (``layer`` takes its number);
    ``plan(scenario)`` counts the LLM requests of the scorers ``run`` builds, where it has any.
    ``deps`` are the data it reads (its code deps are what its module imports), ``params`` the
    keys of params.yaml it reads (a section name: every key of it)."""

    name: str
    run: Callable[..., None]
    deps: tuple[str, ...] = ()
    outs: tuple[Out, ...] = ()
    params: tuple[str, ...] = ()
    metrics: tuple[Out, ...] = ()
    plan: Callable[[Scenario], None] | None = None
    always_changed: bool = False
    per_layer: bool = False  # one stage per layer: ``layer@1``, ``layer@2``...

    @property
    def module(self) -> str:
        return f"hdeval.pipeline.stages.{self.name}"

    @property
    def script(self) -> str:
        """The stage's command in dvc.yaml runs this script: it imports the module and calls
        :meth:`main`."""
        return f"pipelines/{self.name}.py"

    def inputs(self, layers: int) -> list[str]:
        """``deps`` for a tree of ``layers`` layers."""
        found: list[str] = []
        for dep in self.deps:
            if dep == EVERY_LAYER:
                found += [str(ws.layer_dir(n)) for n in range(1, layers + 1)]
            else:
                found.append(dep.replace(FINAL_LAYER, str(ws.layer_dir(layers))))
        return found

    def out_paths(self, key: str = "") -> list[str]:
        """The paths of ``outs`` (``key``: the layer's number, for ``${key}``)."""
        return [out.path.replace("${key}", key) for out in self.outs]

    def main(self) -> None:
        """Run the stage from its script's command line, as :func:`ws.run_stage` does."""
        args = sys.argv[1:]
        name = f"{self.name}@{args[0]}" if self.per_layer else self.name
        ws.run_stage(name, lambda: self.run(load_params(ws.PARAMS), *args))
