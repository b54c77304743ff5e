"""Sections ``evaluate``, ``dhp`` and ``acceptance``: how a trained evaluator is measured and
when it is accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from hdeval.params.base import DHPTask, Section, refuse_retired
from hdeval.params.judge import LLMConfig


class PeerParams(Section):
    """A published evaluator's per-row predictions, compared with the bundle on the same
    rows (docs/data.md has the file formats). A yardstick only: nothing the bundle is
    trained, selected, tuned or gated on reads it, unless ``acceptance.baselines`` names it."""

    name: str = Field("peer", pattern=r"^[a-z][a-z0-9_-]*$")
    """Its name in the comparison table (e.g. ``unieval``)."""
    path: Path
    """The predictions file; when it is not there the peer is left out, with a note saying so."""
    format: Literal["jsonl", "topical-chat", "sfres", "sfhot"] = "jsonl"
    """``jsonl`` rows ``{"id", "scores": {aspect: score}}``, or a published result file in the
    form of a data set's file (its row i is that data's row i, scores under
    ``predict_scores``), as UniEval publishes them."""

    @model_validator(mode="after")
    def _not_a_scorer_name(self) -> PeerParams:
        if self.name in {"hdeval", "direct-prompt", "overall-prompt", "likelihood", "rouge"}:
            raise ValueError(f"peer name {self.name!r} is a scorer of hdeval's own; pick another")
        return self


class EvaluateParams(Section):
    """Cross-fitted agreement of the bundle and every baseline on every labelled document."""

    folds: int = Field(5, ge=2)
    """Outer document-grouped folds: each text is predicted by a model whose whole selection
    (families, feature set, kind, tuning) saw only the other folds' documents."""
    bootstrap: int = Field(200, ge=0)
    """Document-bootstrap draws for the 95 % CIs (0: none)."""
    interval_level: float | None = Field(0.9, gt=0, lt=1)
    """Coverage of the prediction interval each aspect score carries (in the bundle, ``hdeval
    score``'s rows and the report): split-conformal quantiles of the cross-fitted errors
    |human - predicted|; null: the bundle has no intervals."""
    interval_bins: int = Field(3, ge=1)
    """Bins of the predicted score, equal in count, each with an interval width of its own
    (texts predicted near a scale's end err less); 1: one width per aspect. A bin holds at least
    the texts the level needs (9 at 0.9), so fewer bins are used on few texts."""
    peer: PeerParams | None = None
    """A published peer's predictions reported beside the bundle (null: none)."""


class DHPParams(Section):
    """The DHP benchmark: perturbed reference texts scored against their originals."""

    task: DHPTask = "summarization"
    """DHP's perturbation set and default expert weights: summarization, story, qa,
    translation, or our own sets for dialogue responses and data-to-text."""
    n_texts: int = Field(20, ge=2)
    """Reference texts perturbed. 5 is the least that can reach p < 0.05, where one text moving
    the wrong way refuses a scorer; 20 leave the verdict to the scorer, not to chance."""
    seed: int = 0
    """Seed of the perturbations."""
    baselines: list[Literal["direct-prompt", "overall-prompt", "likelihood"]] = Field(
        default_factory=lambda: ["likelihood"]
    )
    """Same-judge baselines benchmarked beside the bundle on the same texts. ``likelihood`` (its
    single signals included) reads what a likelihood bundle reads: no LLM call of its own. A
    prompt baseline asks 4 prompts more per text (the default run's dhp stage: 5.0 min with
    direct-prompt, 3.2 without), and the 0.5B judge's prompts discern nothing: add
    ``direct-prompt`` for a stronger judge."""
    llm_perturbations: bool = False
    """Also DHP's LLM-made perturbations (fictional entities, grammar errors, rewriting); the
    0.5B judge cannot make them: give a 7B+ ``perturber``."""
    perturber: LLMConfig | None = None
    """The LLM that writes the LLM-made perturbations; null: the judge."""
    probes: bool = True
    """Also our instruction-injection probe (a sentence asking the judge for top marks)."""
    weights: dict[str, dict[str, float]] | None = None
    """Expert weights ``{perturbation: {aspect: weight}}``; null: the task's built-in ones."""

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: object) -> object:
        return refuse_retired(
            data,
            "dhp",
            {"threshold": "acceptance.dhp_threshold", "on_failure": "acceptance.on_failure"},
            " (one acceptance section for the DHP and baseline gates)",
        )


#: Same-judge baselines the bundle must not fall behind (names of the comparison table).
GATE_BASELINES = [
    "direct-prompt",
    "likelihood",
    "likelihood:unconditioned",
    "likelihood:source_free",
    "likelihood:pmi",
]


class AcceptanceParams(Section):
    """The gates a trained bundle must pass (stage ``acceptance``)."""

    on_failure: Literal["fail", "warn"] = "warn"
    """fail: a refused bundle fails ``dvc repro`` / ``hdeval train``; warn: it is recorded."""
    dhp_threshold: float = 1.0
    """Least DHP D_min^EW accepted (D = log_0.05 p: 1 means discerned at p < 0.05)."""
    baselines: list[str] = Field(default_factory=lambda: list(GATE_BASELINES))
    """Same-judge baselines (names of the comparison table) the bundle must not fall behind."""
    baseline_margin: float = Field(0.02, ge=0)
    """Refused when below the best of ``baselines`` by more than this."""
    level: Literal["dataset", "summary", "system"] = "dataset"
    """The level of the agreement compared."""
    correlation: Literal["pearson", "spearman", "kendall"] = "pearson"
    """The correlation compared (averaged over the aspects)."""
