"""What the final layer scored, read once from its outs: the stages after the layers build on it
instead of rewriting params."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hdeval import workspace as ws
from hdeval.llm.judge import CachedJudge
from hdeval.params import Params
from hdeval.scoring.columns import Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.tree.criteria import CriteriaTree


@dataclass(frozen=True)
class FinalLayer:
    """The final tree, the modes its texts were scored in (a judge without likelihoods, or mode
    pruning, leaves some out) and its report."""

    tree: CriteriaTree
    modes: tuple[str, ...]
    report: dict

    @classmethod
    def read(cls, params: Params, root: Path = Path(".")) -> FinalLayer:
        """The final layer's outs in the project ``root``."""
        folder = root / ws.layer_dir(params.hierarchy.layers)
        report = ws.read_json(folder / "report.json")
        return cls(CriteriaTree.from_yaml(folder / "tree.yaml"), tuple(report["modes"]), report)

    def params_scored(self, params: Params) -> Params:
        """``params`` with ``hierarchy.modes`` the modes scored: what model selection picks
        feature sets from."""
        hierarchy = params.hierarchy.model_copy(update={"modes": list(self.modes)})
        return params.model_copy(update={"hierarchy": hierarchy})

    def scorer(self, judge: CachedJudge, params: Params, unconditioned: bool) -> CriterionScorer:
        """The scorer of the final layer's features for rows the layers did not score;
        ``unconditioned``: the layers scored the text's own likelihood."""
        profile = Profile.of(params.hierarchy)
        return CriterionScorer(judge, params.task, list(self.modes), unconditioned, profile)
