"""DHP's expert weights per task: how much each metric should react to each perturbation."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from hdeval.errors import ConfigError

#: Expert weights per task and perturbation family (the name without ``_minor``/``_major``): how
#: much each of the task's DHP metrics (paper, Appendix A) should be hurt. OUR OWN choice, not the
#: paper's numbers (DHP shows its survey results only as a figure). Summaries (SummEval aspects):
#: character noise and grammar errors hurt fluency; fictional entities hurt consistency; reordering
#: hurts coherence; reworded insertions with unsupported details hurt consistency, relevance (extra
#: content) and coherence (redundancy); a summary cut to its first half (our test, not DHP's) hurts
#: relevance, and coherence a little; one sentence negated (ours too) hurts consistency. Story
#: endings (coherence, consistency, fluency): noise and grammar hurt fluency; a fictional entity
#: breaks consistency with the story; another story's ending breaks coherence and consistency alike,
#: the data set's wrong ending (plausible, but contradicting the story) mostly consistency. Answers
#: have one metric (answer quality), which gets weight 1 anyway: no table needed. Translations (MQM
#: accuracy, fluency): noise and grammar hurt fluency; deleted words are omissions and fictional
#: entities mistranslations, both accuracy errors. Dialogue responses (Topical-Chat's USR aspects)
#: and data-to-text sentences (SFRES/SFHOT) are not DHP tasks; the weights are ours too. Dialogue:
#: character noise and grammar errors hurt naturalness (and understandability); reordering the
#: sentences of a reply hurts coherence with the conversation; a fictional entity is knowledge the
#: fact does not ground. Data-to-text: noise and grammar hurt naturalness; deleted words and
#: fictional entities drop or falsify slot values, i.e. informativeness, as does a sentence cut to
#: its first half. "overall" gets a share of each. The injection probe weighs every metric equally:
#: rewarding it is a failure.
EXPERT_WEIGHTS: dict[str, dict[str, dict[str, float]]] = {
    "summarization": {
        "deletion": {"fluency": 0.7, "coherence": 0.2, "relevance": 0.1},
        "typo": {"fluency": 0.8, "coherence": 0.1, "relevance": 0.1},
        "fictional_entities": {"consistency": 0.8, "relevance": 0.2},
        "grammar": {"fluency": 0.8, "coherence": 0.2},
        "reorder": {"coherence": 0.9, "fluency": 0.1},
        "rewrite_insert": {"consistency": 0.4, "relevance": 0.3, "coherence": 0.3},
        "first_half": {"relevance": 0.8, "coherence": 0.2},
        "negation": {"consistency": 0.9, "coherence": 0.1},
        "instruction_injection": {
            "coherence": 0.25,
            "consistency": 0.25,
            "fluency": 0.25,
            "relevance": 0.25,
        },
    },
    "story": {
        "deletion": {"fluency": 0.8, "coherence": 0.2},
        "typo": {"fluency": 0.9, "coherence": 0.1},
        "fictional_entities": {"consistency": 0.8, "coherence": 0.2},
        "grammar": {"fluency": 0.8, "coherence": 0.2},
        "random_ending": {"coherence": 0.5, "consistency": 0.5},
        "wrong_ending": {"consistency": 0.7, "coherence": 0.3},
        "instruction_injection": {"coherence": 1.0, "consistency": 1.0, "fluency": 1.0},
    },
    "qa": {},
    "translation": {
        "deletion": {"fluency": 0.8, "accuracy": 0.2},
        "typo": {"fluency": 0.9, "accuracy": 0.1},
        "word_deletion": {"accuracy": 0.7, "fluency": 0.3},
        "fictional_entities": {"accuracy": 1.0},
        "grammar": {"fluency": 0.9, "accuracy": 0.1},
        "instruction_injection": {"accuracy": 0.5, "fluency": 0.5},
    },
    "dialogue": {
        "deletion": {"naturalness": 0.5, "understandability": 0.3, "overall": 0.2},
        "typo": {"naturalness": 0.6, "understandability": 0.2, "overall": 0.2},
        "reorder": {"coherence": 0.6, "naturalness": 0.3, "overall": 0.1},
        "fictional_entities": {"groundedness": 0.6, "coherence": 0.2, "overall": 0.2},
        "grammar": {"naturalness": 0.7, "understandability": 0.2, "overall": 0.1},
        "instruction_injection": dict.fromkeys(
            (
                "naturalness",
                "coherence",
                "engagingness",
                "groundedness",
                "understandability",
                "overall",
            ),
            1.0,
        ),
    },
    "data_to_text": {
        "deletion": {"naturalness": 0.6, "informativeness": 0.2, "overall": 0.2},
        "typo": {"naturalness": 0.7, "overall": 0.3},
        "word_deletion": {"informativeness": 0.6, "naturalness": 0.2, "overall": 0.2},
        "fictional_entities": {"informativeness": 0.7, "overall": 0.3},
        "first_half": {"informativeness": 0.7, "naturalness": 0.1, "overall": 0.2},
        "grammar": {"naturalness": 0.7, "overall": 0.3},
        "instruction_injection": {"informativeness": 1.0, "naturalness": 1.0, "overall": 1.0},
    },
}
DEFAULT_EXPERT_WEIGHTS = EXPERT_WEIGHTS["summarization"]


# --------------------------------------------------------------------------- weights


def _family(name: str) -> str:
    for suffix in ("_minor", "_major"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def resolve_weights(
    name: str, metrics: Sequence[str], weights: Mapping[str, Mapping[str, float]] | None
) -> tuple[dict[str, float], str]:
    """Expert weights of perturbation ``name`` over ``metrics``, normalised to sum 1.

    Looked up by full name, then by family (name without ``_minor``/``_major``). Metrics the
    weights do not name get 0. Returns (weights, source): source is "expert", or "equal" when no
    weight names one of the scorer's metrics (e.g. a scorer with a single "overall" metric).
    """
    table = DEFAULT_EXPERT_WEIGHTS if weights is None else weights
    given = table.get(name, table.get(_family(name), {}))
    raw = {m: float(given.get(m, 0.0)) for m in metrics}
    if any(v < 0 or not math.isfinite(v) for v in raw.values()):
        raise ConfigError(f"expert weights of {name!r} must be non-negative: {dict(given)}")
    total = sum(raw.values())
    if total <= 0:
        return {m: 1.0 / len(metrics) for m in metrics}, "equal"
    return {m: v / total for m, v in raw.items()}, "expert"
