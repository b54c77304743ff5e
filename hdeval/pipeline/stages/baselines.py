"""Stage baselines: the same judge as direct prompts, an overall prompt, GPTScore likelihood,
ROUGE and a published peer's predictions (``evaluate.peer``), against HD-Eval and its ablations
on the same rows: every row of the run, the bundle by its cross-fitted predictions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from hdeval import workspace as ws
from hdeval.baselines import compare, entries, render_markdown
from hdeval.baselines.peer import peer_scores, read_peer
from hdeval.baselines.registry import BASELINES, TextScorer, make_scorers, without_likelihood
from hdeval.data import load_labels
from hdeval.llm.judge import CachedJudge, open_judge
from hdeval.params import Params
from hdeval.pipeline.stages.base import Out, Stage
from hdeval.tree.criteria import aspects_tree

if TYPE_CHECKING:
    from hdeval.pipeline.scenario import Scenario


def scorers(
    judge: CachedJudge, params: Params, progress: bool = False
) -> tuple[list[TextScorer], dict]:
    """The baselines the judge can score, and ``{left-out name: why}``."""
    names, left_out = without_likelihood(BASELINES, judge.likelihood_problem())
    made = make_scorers(
        names, judge, params.task, aspects_tree(params.data), params.data.aspects, progress=progress
    )
    return made, left_out


def run(params: Params) -> None:
    test = load_labels(ws.ROWS, params.data.aspects, params.data.score_range)
    judge = open_judge(params.llm)
    scores: dict = {
        path.stem: ws.read_features(path)
        for path in sorted((ws.EVALUATE / "predictions").glob("*.csv"))
    }
    made, left_out = scorers(judge, params, progress=True)
    scores.update({scorer.name: scorer.score(test.samples) for scorer in made})
    peer = params.evaluate.peer
    if peer is not None and peer.path.is_file():  # a yardstick: read here only
        table = read_peer(peer.path, peer.format, params.data.aspects)
        scores[peer.name] = peer_scores(table, test.samples.index, peer.path)
    elif peer is not None:
        left_out[f"peer {peer.name}"] = f"{peer.path} not found (evaluate.peer.path)"
    table = compare(
        scores,
        test.samples,
        test.targets,
        n_boot=params.evaluate.bootstrap,
        seed=params.hierarchy.seed,
    )
    out = ws.fresh(ws.BASELINES)
    table.to_csv(out / "compare.csv", index=False)
    aspects = list(test.targets.columns)  # each entry's predictions, for paired comparisons
    predicted = [
        frame.assign(entry=entry)
        for name, scored in scores.items()
        for entry, frame in entries(name, scored.reindex(test.samples.index), aspects).items()
    ]
    pd.concat(predicted).rename_axis("id").to_csv(out / "predictions.csv")
    (out / "compare.md").write_text(
        render_markdown(table, levels=("dataset", "summary"), correlations=("pearson", "spearman"))
    )
    ws.write_json(out / "cost.json", judge.cost())
    ws.write_json(out / "left_out.json", {f"baseline {k}": v for k, v in left_out.items()})
    print(f"comparison of {table['scorer'].nunique()} scorers written to {out / 'compare.md'}")


def plan(scenario: Scenario) -> None:
    """The LLM baselines' requests on every row of the run (ROUGE asks none)."""
    cost = scenario.cost("baselines")
    if cost.rerun:
        every = pd.concat([scenario.train.samples, scenario.test.samples])
        for scorer in scorers(scenario.judge, scenario.params)[0]:
            if hasattr(scorer, "plan"):
                scenario.planner.count(cost, scorer.plan(every))


STAGE = Stage(
    "baselines",
    run,
    deps=(
        "work/prepared/rows.jsonl",
        "work/evaluate/predictions",
        "work/peer.json",
        "${data.criteria}",
    ),
    outs=(Out("work/baselines"),),
    params=("data.aspects", "data.score_range", "task", "llm", "hierarchy.seed", "evaluate"),
    plan=plan,
)
