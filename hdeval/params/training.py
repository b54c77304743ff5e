"""Sections ``hierarchy`` and ``aggregator``: how the criteria tree grows, how scores become
features, and how the aggregator is chosen and fit."""

from __future__ import annotations

from pydantic import Field, model_validator

from hdeval.params.base import (
    AggregatorKind,
    Family,
    FeatureModes,
    LikelihoodStat,
    Mode,
    Section,
    refuse_retired,
)
from hdeval.params.judge import LLMConfig


class CriterionOverride(Section):
    """A person's correction of one criterion of the tree (``hierarchy.overrides``)."""

    name: str | None = Field(None, min_length=1)
    """Replaces the name the LLM wrote (the id stays, so features keep their column)."""
    definition: str | None = Field(None, min_length=1)
    """Replaces the definition the LLM wrote."""
    pin: bool = False
    """Keep the criterion as it is: never decomposed further."""
    delete: bool = False
    """Remove the criterion and everything below it."""

    @model_validator(mode="after")
    def _delete_alone(self) -> CriterionOverride:
        if self.delete and (self.name or self.definition or self.pin):
            raise ValueError("delete cannot be combined with name, definition or pin")
        return self


class HierarchyParams(Section):
    """How the criteria tree grows (HD-Eval's Algorithm 1) and how scores become features."""

    layers: int = Field(3, ge=1, le=6)
    """Layers of the tree; must match the layer list in dvc.yaml."""
    children: int = Field(2, ge=1, le=12)
    """At most this many children per decomposed criterion."""
    top_k: int = Field(2, ge=0)
    """Criteria of the newest layer decomposed again (attribution pruning picks them)."""
    modes: list[Mode] = Field(default_factory=lambda: ["likelihood"], min_length=1)
    """How the judge scores a criterion: prompt (expected 1-5 score) and/or likelihood (its
    token log-probabilities of the text after an instruction naming the criterion)."""
    unconditioned: bool = True
    """With likelihoods, the text's own signals too: its likelihood given the source without a
    criterion (``lik:_text``), and what ``source_free`` and ``length`` add."""
    likelihood_stats: list[LikelihoodStat] = Field(
        default_factory=lambda: ["mean", "min", "p10", "p25", "surprise"], min_length=1
    )
    """Statistics of the token log-probabilities every likelihood column holds: mean, min,
    10th and 25th percentile, share of surprising tokens
    (:mod:`hdeval.scoring.likelihood_stats`)."""
    source_free: bool = True
    """Also the text's likelihood without the source (``lik:_free``: the judge's prior,
    fluency) and its difference from the likelihood given the source (``pmi:_text``,
    ``pmi.sum:_text``: how much the source explains the text, grounding)."""
    length: bool = True
    """Also the text's length in words (``len.words:_text``: whitespace-separated, so typos
    do not lengthen it; not a quality judgement, so exempt from the weight signs and the rising
    check)."""
    end_of_text: bool = True
    """Read every likelihood of the text as a whole reply: the judge's end-of-reply marker (its
    chat template's, e.g. ``<|im_end|>``) follows the text, so a text that stops mid-sentence is
    unlikely where a complete one is not. One token more per request; the same likelihoods
    without the marker (the likelihood baselines') are then read off these, with no LLM call. A
    judge whose template marks no end of a reply is refused."""
    families: list[Family] = Field(default_factory=lambda: ["sentences", "repetition"])
    """Signal families scored with the text's own signals (:mod:`hdeval.scoring.families`):
    ``coverage`` (the source's opening given the text: one more pass per text, about a fifth of
    the default run's prompt tokens, so opt-in), ``sentences`` (PMI per sentence),
    ``repetition`` (the text repeating its own word trigrams; no LLM call), ``slots`` (a
    meaning representation's values realised: data-to-text), ``wording`` (the likelihood of the
    words around a meaning representation's values, with and without the source, and of the
    values themselves; no LLM call: data-to-text), ``dialogue`` (PMI with the history,
    with its last turn and with the knowledge fact apart, the share of word pairs the history
    already said, and whether the context gives a fact: dialogue), ``references``
    (likelihoods both ways and ROUGE against the references: a bundle that reads them needs
    them in every row)."""
    min_family_gain: float | None = 0.005
    """Model selection keeps a family only if adding it to the others raises the CV Pearson by
    at least this (one family at a time, the best first); null keeps every family."""
    proxy_aggregator: AggregatorKind = "linear"
    """The aggregator that ranks criteria between layers."""
    cv_folds: int = Field(5, ge=2)
    """Document-grouped CV folds of the proxy aggregator."""
    importance_repeats: int = Field(5, ge=1)
    """Permutation-importance repeats per fold."""
    seed: int = 0
    """Seed of CV folds, permutations, bootstrap draws and the SHAP background."""
    max_failed_share: float = Field(0.2, ge=0, le=1)
    """Refuse a layer or the tuning when a feature column has more failed scores than this
    share of the training rows (imputed values would be learned instead of scores)."""
    decomposer: LLMConfig | None = None
    """The LLM that writes the criteria; null: the judge (unquantized if it runs int8)."""
    overrides: dict[str, CriterionOverride] = Field(default_factory=dict)
    """A person's corrections of the tree by criterion id, applied after every decomposition."""
    min_mode_gain: float | None = 0.02
    """After each layer, a mode whose criterion columns add less than this to the proxy's CV
    Pearson (the text's own signals kept in both) is not scored in later layers; with no mode
    left the tree stops growing. null scores every mode in every layer, as the paper does."""

    @model_validator(mode="after")
    def _distinct_stats(self) -> HierarchyParams:
        if len(set(self.likelihood_stats)) != len(self.likelihood_stats):
            raise ValueError(f"likelihood_stats lists a statistic twice: {self.likelihood_stats}")
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"families lists a family twice: {self.families}")
        needs_free = {"sentences", "wording", "dialogue"} & set(self.families)
        if needs_free and not self.source_free:
            if "families" not in self.model_fields_set:  # the default list, with source_free off
                self.families = [f for f in self.families if f not in needs_free]
                return self
            raise ValueError(
                f"families {sorted(needs_free)} read the text's likelihood without the source: "
                "set source_free: true"
            )
        return self


class AggregatorParams(Section):
    """The final aggregator: model selection by document-grouped CV on the training documents,
    then an Optuna search of the chosen candidate. A candidate is a feature set
    (``feature_modes`` x deepest layer in ``feature_layers`` x with or without the text's own
    signals) and an aggregator kind."""

    kinds: list[AggregatorKind] = Field(
        default_factory=lambda: ["linear", "tree", "forest", "boosting", "mlp"], min_length=1
    )
    """Aggregator kinds tried (boosting: gradient-boosted trees per aspect; with ``nonnegative``
    boosting and forest are monotone in each column's orientation, one ensemble per aspect)."""
    feature_modes: list[FeatureModes] = Field(
        default_factory=lambda: ["prompt", "likelihood", "both"], min_length=1
    )
    """Feature groups tried (of those ``hierarchy.modes`` scored)."""
    feature_layers: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    """Deepest tree layer whose criteria enter the aggregator, tried."""
    unconditioned: list[bool] = Field(default_factory=lambda: [True, False], min_length=1)
    """With and/or without the text's own signals, tried."""
    n_trials: int = Field(20, ge=0)
    """Optuna trials tuning the chosen candidate; 0 ships its defaults."""
    cv_folds: int = Field(5, ge=2)
    """Document-grouped CV folds of model selection and tuning."""
    prefer_simpler_within: float = Field(0.01, ge=0.0, le=1.0)
    """Ship the simplest candidate (linear, tree, forest, MLP; then fewer features) whose CV
    Pearson is within this of the best; 0 ships the CV-best."""
    nonnegative: bool = True
    """A linear aggregator's weight on each column gets the sign of its orientation: at least
    0 where higher is better, at most 0 where lower is better, either for a column that is no
    quality judgement (length); boosting and forests are monotone the same way. A text worse on
    every criterion then never scores higher. false fits signed weights and free trees."""
    max_rising_share: float | None = Field(0.0, ge=0.0, le=1.0)
    """With ``nonnegative``: the share of training texts another kind may score higher when
    every column is made worse by 0.5-4 standard deviations (:mod:`hdeval.training.monotonicity`);
    above it a candidate is not shipped. null checks nothing (the CV table shows the share)."""

    @property
    def rising_limit(self) -> float | None:
        """The ``rising_share`` a shipped aggregator may have; None: not checked."""
        return self.max_rising_share if self.nonnegative else None

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: object) -> object:
        return refuse_retired(
            data,
            "aggregator",
            {
                "kind": "aggregator.kinds (the candidates model selection chooses from by "
                "grouped CV); write kinds: [linear] to keep one kind"
            },
        )
