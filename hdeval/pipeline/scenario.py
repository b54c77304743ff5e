"""One case of ``hdeval estimate`` (the expected one, or the most it can cost): what every
stage's ``plan`` reads (the run's params, judges, rows and project state), the planner counting
requests into per-stage costs, and the final layer as the layer stages planned it. Both cases
are made by :func:`scenarios`, over the same rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from hdeval.data import LabelledData
from hdeval.data.splitting import load_split
from hdeval.llm.judge import CachedJudge
from hdeval.params import Params
from hdeval.pipeline.project_state import ProjectState
from hdeval.pipeline.request_count import Planner, Probes, StageCost
from hdeval.pipeline.stages.final_layer import FinalLayer
from hdeval.training.hierarchy import usable_modes


@dataclass
class Scenario:
    """``upper``: the most it can cost (the tree grows where that is unknown). ``train``: the
    rows the tree is grown on, ``test``: the rows of the documents it never sees."""

    params: Params
    judge: CachedJudge
    decomposer: CachedJudge
    state: ProjectState
    planner: Planner
    train: LabelledData
    test: LabelledData
    upper: bool
    stages: list[StageCost] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    final: FinalLayer | None = None  # set by the layer stages' plan

    def __post_init__(self) -> None:
        self.hierarchy, _ = usable_modes(self.params.hierarchy, self.judge.likelihood_problem())

    def cost(self, stage: str) -> StageCost:
        """A new stage's cost, counted in the estimate; free where ``dvc repro`` skips it."""
        cost = StageCost(stage, self.state.reruns(stage))
        self.stages.append(cost)
        return cost


def scenarios(
    params: Params,
    judge: CachedJudge,
    decomposer: CachedJudge,
    state: ProjectState,
    probes: Probes,
) -> Iterator[Scenario]:
    """The expected case, then the most it can cost (``upper``), each made when the one before
    has been planned: both read the run's split of the rows, loaded once, and share the texts'
    token counts; each counts requests with a planner of its own, adding to ``probes``."""
    train, test = load_split(params.data)
    lengths: dict[tuple[str, str], int] = {}  # tokens per text, shared by both cases
    for upper in (False, True):
        planner = Planner(judge, decomposer, probes, lengths)
        yield Scenario(params, judge, decomposer, state, planner, train, test, upper)
