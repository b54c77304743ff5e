"""The columns of each signal family (:mod:`hdeval.scoring.families`): their names, orientation,
words and explanation groups. Data only: the feature-column protocol reads it."""

from __future__ import annotations

from collections.abc import Iterable

#: Columns of each family, in order (its keys are the names ``hierarchy.families`` takes).
FAMILY_COLUMNS: dict[str, tuple[str, ...]] = {
    "coverage": ("cov:_text", "cov.gain:_text"),
    "sentences": ("spmi.min:_text", "spmi.max:_text", "spmi.neg:_text", "len.sents:_text"),
    "repetition": ("rep.trigrams:_text",),
    "slots": ("slots.realised:_text", "slots.omitted:_text"),
    "wording": (
        "word.given:_text",
        "word.given.min:_text",
        "word.given.p10:_text",
        "word.free:_text",
        "word.free.min:_text",
        "word.free.p10:_text",
        "vals.given.min:_text",
    ),
    "dialogue": (
        "pmi:_history",
        "pmi:_last",
        "pmi:_fact",
        "rep.history:_text",
        "fact.none:_text",
    ),
    "references": (
        "ref.given:_text",
        "ref.covers:_text",
        "rouge.1:_text",
        "rouge.2:_text",
        "rouge.l:_text",
    ),
}
#: Orientation of family columns that are not "higher is better" (see columns.orientation).
ORIENTATIONS = {
    "spmi.neg": -1,
    "len.sents": 0,
    "rep.trigrams": -1,
    "rep.history": -1,
    "fact.none": 0,
    "slots.omitted": -1,
}
#: Each family's columns in words, for explanations.
WORDS = {
    "cov": "coverage of the source's opening (its likelihood given the text)",
    "cov.gain": "coverage of the source's opening beyond its own likelihood",
    "spmi.min": "least grounded sentence (its PMI with the source)",
    "spmi.max": "best grounded sentence (its PMI with the source)",
    "spmi.neg": "share of sentences the source does not explain (PMI <= 0)",
    "len.sents": "number of sentences (not a quality judgement)",
    "rep.trigrams": "share of word trigrams that repeat an earlier one (the text repeating itself)",
    "slots.realised": "share of the meaning representation's values realised",
    "slots.omitted": "values of the meaning representation left out",
    "word.given": "likelihood of the wording around the values, given the source",
    "word.given.min": "least likely word around the values, given the source",
    "word.given.p10": "likelihood of the wording around the values, given the source: "
    "10th-percentile token",
    "word.free": "fluency of the wording around the values (without the source)",
    "word.free.min": "least fluent word around the values (without the source)",
    "word.free.p10": "fluency of the wording around the values: 10th-percentile token",
    "vals.given.min": "least likely token of the values, given the source (a value mangled, or "
    "after a wrong word)",
    "pmi:_history": "grounding in the dialogue history (PMI)",
    "pmi:_last": "answering the last turn (PMI with it alone)",
    "pmi:_fact": "grounding in the knowledge fact (PMI)",
    "rep.history": "share of word pairs the conversation already said (echoing it)",
    "fact.none": "the context gives no knowledge fact (not a quality judgement)",
    "ref.given": "likelihood given the reference (precision)",
    "ref.covers": "reference covered by the text (recall)",
    "rouge.1": "ROUGE-1 F1 against the references",
    "rouge.2": "ROUGE-2 F1 against the references",
    "rouge.l": "ROUGE-L F1 against the references",
}
#: What each family's contributions are called in an explanation.
GROUPS = {
    "cov": "coverage of the source",
    "spmi": "grounding per sentence",
    "len.sents": "length",
    "rep": "repetition",
    "rep.history": "saying again what the conversation said",
    "fact.none": "no fact to use",
    "slots": "meaning representation realised",
    "word": "wording around the values",
    "vals": "the values in their context",
    "ref": "agreement with the references",
    "rouge": "agreement with the references",
}
REFERENCE_FAMILIES = frozenset({"references"})


def reads_references(families: Iterable[str]) -> bool:
    """Whether a bundle of these families reads every text's references."""
    return not REFERENCE_FAMILIES.isdisjoint(families)


def family_of(column: str) -> str | None:
    """The family a column belongs to, or None for a criterion's or the base text signals."""
    return next((f for f, cols in FAMILY_COLUMNS.items() if column in cols), None)
