"""What a pipeline run will cost before it runs: per LLM stage, the calls and prompt tokens that
``dvc repro`` would spend, and their time on the configured judge.

A stage ``dvc repro`` would not re-run costs nothing (:mod:`hdeval.pipeline.project_state`);
one it re-runs costs the requests its scorers plan that the cache does not hold
(:mod:`hdeval.pipeline.request_count`), timed by a calibration on the judge
(:mod:`hdeval.pipeline.calibration`). A finished layer is read from its outs; one still to run
is planned as the layer stage would run it.

What cannot be known before the run is given twice. With ``hierarchy.min_mode_gain`` set the
tree grows past a layer only if one of its scoring modes adds that much to the proxy's CV
Pearson: the **expected** case takes the tree to stop there, the **at most** case to grow with
every mode. Where decompositions are not cached yet, each decomposed node is taken to get
``hierarchy.children`` criteria, and the nodes pruning will pick (layer 3 onwards) are stood in
for by the first ``top_k``. Until ``train`` has run, the bundle ``dhp`` scores with is taken to
read what the present bundle reads (where there is one for these aspects and criteria), at most
every criterion of the final tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hdeval.llm.judge import CachedJudge
from hdeval.params import Params
from hdeval.pipeline.project_state import ProjectState
from hdeval.pipeline.registry import STAGES
from hdeval.pipeline.request_count import Probes, StageCost
from hdeval.pipeline.scenario import scenarios

#: Passes per kind of request a calibration times (a server: at least its concurrency).
PROBE_PASSES = 8


@dataclass
class Estimate:
    """Per LLM stage, the expected cost and the most it can cost (``upper``, same stages),
    what the expected case assumes, and the work a calibration can time."""

    expected: list[StageCost]
    upper: list[StageCost]
    assumptions: list[str] = field(default_factory=list)
    probes: Probes = field(default_factory=lambda: Probes(PROBE_PASSES))


def estimate(
    params: Params, judge: CachedJudge, decomposer: CachedJudge, state: ProjectState
) -> Estimate:
    """The LLM work of every LLM stage that ``dvc repro`` in ``state``'s project would run,
    after the cache: the expected case and the most it can be, each the sum of every stage's
    ``plan``."""
    concurrency = int(getattr(judge.backend, "concurrency", 1))
    probes = Probes(max(PROBE_PASSES, 2 * concurrency))
    cases = []
    for case in scenarios(params, judge, decomposer, state, probes):
        for stage in STAGES:
            if stage.plan is not None:
                stage.plan(case)
        cases.append(case)
    expected, most = cases
    assumed = list(dict.fromkeys(expected.assumptions + most.assumptions))
    return Estimate(expected.stages, most.stages, assumed, probes)
