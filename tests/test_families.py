"""Signal families (hdeval.scoring.families, hdeval.scoring.sources,
hdeval.scoring.text_measures): what each column reads of a sample, without a judge; the real
judge's families are tested in test_family_judge.py."""

from __future__ import annotations

import typing

import pytest

from hdeval.errors import ConfigError, DataValidationError
from hdeval.llm.cache import ResultCache
from hdeval.llm.chat_template import reply_end
from hdeval.llm.judge import CachedJudge
from hdeval.llm.types import LogLikelihood
from hdeval.params import Family, TaskSpec
from hdeval.scoring.columns import Profile, describe, feature_columns, group_of, orientation
from hdeval.scoring.families import (
    FamilySample,
    passes,
    sentence_values,
    values,
    wording_values,
)
from hdeval.scoring.family_columns import FAMILY_COLUMNS
from hdeval.scoring.sources import (
    dialogue_parts,
    last_turn,
    parse_mr,
    realised,
    sentence_spans,
    value_spans,
)
from hdeval.scoring.text_measures import repeated_trigrams, said_before


def test_every_family_a_param_names_has_columns_and_no_other() -> None:
    assert set(typing.get_args(Family)) == set(FAMILY_COLUMNS)


def test_meaning_representation_pairs_and_what_is_spoken() -> None:
    mr = parse_mr("inform(name='red door cafe';food=chinese;kids_allowed=yes;area=dont_care)")
    assert mr.acts == ("inform",)
    assert mr.pairs[0] == ("name", "red door cafe")
    assert mr.spoken_values() == ["red door cafe", "chinese"]
    assert parse_mr("inform_no_match(area=hayes valley)|request(food)").acts == (
        "inform_no_match",
        "request",
    )


@pytest.mark.parametrize("bad", ["inform name=x", "inform(name='x';;)", "the red door cafe"])
def test_a_malformed_meaning_representation_is_refused_saying_what(bad: str) -> None:
    with pytest.raises(DataValidationError, match=r"meaning representation|malformed"):
        parse_mr(bad)


def test_slots_count_the_values_realised_and_left_out() -> None:
    sample = FamilySample("inform(name='red door cafe';food=chinese;area=dont_care)", "")
    whole = values("slots", sample.__class__(sample.source, "Red Door Cafe serves Chinese."),
                   {}, None, None, None)  # fmt: skip
    half = values("slots", sample.__class__(sample.source, "Red door cafe is nice."),
                  {}, None, None, None)  # fmt: skip
    assert whole == {"slots.realised:_text": 1.0, "slots.omitted:_text": 0.0}
    assert half == {"slots.realised:_text": 0.5, "slots.omitted:_text": 1.0}
    assert not realised("chin", "Chinese food")  # whole words only


@pytest.mark.parametrize(
    ("value", "text", "said"),
    [
        ("hotel", "There are 3 hotels near the mission.", True),
        ("moderate", "It is moderately priced.", True),
        ("ultra high end", "an ultra high endly priced hotel", True),
        ("4", "There are 45 hotels.", False),
        ("chin", "Chinese food", False),
        ("high end", "an end that is high", False),
    ],
)
def test_a_value_is_realised_whole_or_inflected_never_as_part_of_another_word(
    value: str, text: str, said: bool
) -> None:
    assert realised(value, text) is said


def test_a_value_inside_another_value_counts_only_where_it_is_said_apart() -> None:
    source = "inform(name='inn at the presidio';near=presidio)"
    said = FamilySample(source, "The inn at the presidio is near the presidio.")
    left_out = FamilySample(source, "The inn at the presidio is a nice hotel.")
    assert values("slots", said, {}, None, None, None)["slots.omitted:_text"] == 0.0
    assert values("slots", left_out, {}, None, None, None)["slots.omitted:_text"] == 1.0


def test_wording_reads_the_tokens_around_the_values_apart_from_the_values() -> None:
    mr = "inform(name='inn at the presidio';near=presidio;dogs_allowed=no)"
    text = "He Inn at the Presidio is near presidio."
    spans = value_spans(parse_mr(mr), text)
    assert [text[a:b] for a, b in spans] == ["Inn at the Presidio", "Presidio", "presidio"]
    words = ["He", " Inn", " at", " the", " Presidio", " is", " near", " presidio", "."]

    def count(prefix: str) -> int:  # tokens of a prefix, as a tokenizer counts them
        return sum(len("".join(words[: i + 1])) <= len(prefix) for i in range(len(words)))

    given = LogLikelihood(tokens=(-9.0, -4.0, -1.0, -1.0, -1.0, -2.0, -2.0, -0.5, -3.0))
    free = LogLikelihood(tokens=(-8.0, -6.0, -6.0, -6.0, -6.0, -3.0, -3.0, -7.0, -1.0))
    out = wording_values(FamilySample(mr, text), given, free, count)
    assert out["word.given:_text"] == pytest.approx(-4.0)  # He, is, near, "."
    assert out["word.given.min:_text"] == -9.0 and out["word.free.min:_text"] == -8.0
    assert out["word.free:_text"] == pytest.approx(-3.75)
    assert out["vals.given.min:_text"] == -4.0  # the value's first token, after "He"
    by_chars = wording_values(FamilySample(mr, text), given, free, None)
    assert by_chars["word.given.min:_text"] == -9.0
    no_value = wording_values(FamilySample("request(area)", "Where?"), LogLikelihood((-2.0,)),
                              LogLikelihood((-3.0,)), None)  # fmt: skip
    assert no_value["vals.given.min:_text"] == 0.0 and no_value["word.given:_text"] == -2.0
    every_value = wording_values(FamilySample("inform(area=presidio)", "Presidio"),
                                 LogLikelihood((-2.0,)), LogLikelihood((-3.0,)), None)  # fmt: skip
    assert every_value["word.free:_text"] == -3.0  # the whole text stands for the wording


def test_a_yes_or_no_question_has_no_value_to_say() -> None:
    mr = parse_mr("confirm(dogs_allowed='yes or no';area='nob hill')")
    assert mr.spoken_values() == ["nob hill"]


def test_dialogue_source_splits_into_history_last_turn_and_fact() -> None:
    history, fact = dialogue_parts("Conversation history:\nhi there\nhello\n\nFact: cats purr")
    assert (history, fact) == ("hi there\nhello", "cats purr")
    assert last_turn(history) == "hello"
    assert last_turn(dialogue_parts("Conversation history:\n\n\nFact: cats purr")[0]) == ""
    with pytest.raises(DataValidationError, match="not a dialogue source"):
        dialogue_parts("A news article.")


def test_sentence_pmi_finds_the_sentence_the_source_does_not_explain() -> None:
    text = "The council voted. Aliens landed."
    assert sentence_spans(text) == [(0, 18), (19, 33)]
    given = LogLikelihood(tokens=(-1.0, -1.0, -1.0, -6.0, -6.0))
    free = LogLikelihood(tokens=(-3.0, -3.0, -3.0, -5.0, -5.0))
    out = sentence_values(text, given, free, lambda s: 3 if s == text[:18] else 5)
    assert out == {"spmi.min:_text": -1.0, "spmi.max:_text": 2.0, "spmi.neg:_text": 0.5,
                   "len.sents:_text": 2.0}  # fmt: skip
    by_chars = sentence_values(text, given, free, None)
    assert by_chars["len.sents:_text"] == 2.0 and by_chars["spmi.min:_text"] < 0


def test_references_family_needs_references_and_reads_rouge() -> None:
    task = TaskSpec()
    with pytest.raises(DataValidationError, match="no references"):
        passes("references", FamilySample("src", "text"), task)
    sample = FamilySample("src", "the cat sat", ("the cat sat on the mat", "a dog"))
    names = [p.name for p in passes("references", sample, task)]
    assert names == ["given_reference", "covers_reference"]
    out = values("references", sample, {}, None, None, None)
    assert out["rouge.1:_text"] == pytest.approx(2 * 3 / (3 + 6))


def test_family_columns_follow_the_text_signals_with_orientation_and_words() -> None:
    profile = Profile(("mean",), True, True, ("coverage", "sentences"))
    columns = feature_columns(["coh"], ["likelihood"], True, profile)
    assert columns[-6:] == [*FAMILY_COLUMNS["coverage"], *FAMILY_COLUMNS["sentences"]]
    assert orientation("spmi.neg:_text") == -1 and orientation("len.sents:_text") == 0
    assert orientation("cov:_text") == 1 and orientation("slots.omitted:_text") == -1
    assert "coverage" in describe("cov.gain:_text")
    assert group_of("spmi.min:_text") == "grounding per sentence"
    assert group_of("pmi:_fact") == "grounding in the knowledge fact (PMI)"
    assert group_of("rep.history:_text") == "saying again what the conversation said"
    assert group_of("rep.trigrams:_text") == "repetition"


def test_repetition_is_the_share_of_word_trigrams_seen_before() -> None:
    assert repeated_trigrams("the cat sat on the mat .") == 0.0
    assert repeated_trigrams("two words") == 0.0  # no trigram at all
    looped = "wales beat israel . wales beat israel . wales beat israel ."
    assert repeated_trigrams(looped) == pytest.approx(1 - 4 / 10)  # 10 trigrams, 4 distinct
    assert repeated_trigrams(looped.upper()) == repeated_trigrams(looped)  # case is not a word
    sample = FamilySample("a source", looped)
    assert passes("repetition", sample, TaskSpec()) == []  # no LLM call
    assert values("repetition", sample, {}, None, None, None) == {
        "rep.trigrams:_text": pytest.approx(0.6)
    }
    assert orientation("rep.trigrams:_text") == -1  # more repetition, a worse text
    assert describe("rep.trigrams:_text").startswith("share of word trigrams that repeat")
    assert group_of("rep.trigrams:_text") == "repetition"


def test_a_response_that_echoes_the_conversation_is_measured_apart_from_one_in_its_own_words():
    source = "Conversation history:\ndo you like jazz ?\ni love jazz , it is great .\n\nFact: x"

    def dialogue(text: str) -> dict[str, float]:
        return values("dialogue", FamilySample(source, text), {}, None, None, None)

    echo, own = dialogue("i love jazz , it is great ."), dialogue("miles davis moved me most .")
    # no likelihoods: only the pairs said before, and whether the context gives a fact
    assert echo == {"rep.history:_text": 1.0, "fact.none:_text": 0.0}
    assert own == {"rep.history:_text": 0.0, "fact.none:_text": 0.0}
    assert said_before("yes", "yes yes") == 0.0  # a one-word reply has no pair to repeat


def test_a_context_without_a_fact_is_a_column_of_its_own() -> None:
    """Topical-Chat writes ``_nofact`` where a context gives no fact; its raters then judge a
    response's use of knowledge otherwise, which the fact's PMI cannot show."""
    history = "Conversation history:\ndid you know they have no rib cages ?\n\n"
    for fact, none in (("Fact: _nofact", 1.0), ("Fact: snakes have ribs", 0.0)):
        out = values("dialogue", FamilySample(history + fact, "i did n't know that !"), {}, None,
                     None, None)  # fmt: skip
        assert out["fact.none:_text"] == none, fact
    assert orientation("fact.none:_text") == 0  # says what the context is, not how good
    assert group_of("fact.none:_text") == "no fact to use"


def test_the_end_of_reply_marker_follows_every_whole_text_read_as_a_reply_and_nothing_else():
    """With ``end_of_text`` the marker ends each continuation that is a whole text (the
    response, the reference), never the source's cut opening, nor a text read as context."""
    task, end = TaskSpec(), "<|im_end|>"
    sample = FamilySample("Conversation history:\nhi\n\nFact: cats purr", "cats purr", ("ref",))
    read = {f: passes(f, sample, task, end) for f in ("dialogue", "references", "coverage")}
    ended = {
        (f, p.name) for f, specs in read.items() for p in specs if p.continuation.endswith(end)
    }
    replies = {"dialogue": ("history", "last", "fact"),
               "references": ("given_reference", "covers_reference")}  # fmt: skip
    assert ended == {(f, name) for f, names in replies.items() for name in names}
    assert not any(end in s for specs in read.values() for p in specs for s in p.segments)
    plain = passes("dialogue", sample, task)
    assert [p.continuation + end for p in plain] == [p.continuation for p in read["dialogue"]]


def test_reply_end_is_the_first_line_after_a_reply() -> None:
    assert reply_end("<|im_end|>\n<|im_start|>assistant\n") == "<|im_end|>"
    assert reply_end("<|eot_id|>") == "<|eot_id|>"
    assert reply_end("") == ""


def test_a_judge_that_marks_no_end_of_a_reply_is_refused_naming_the_switch(tmp_path) -> None:
    class Plain:  # a backend whose chat template puts nothing after a reply
        identity = "plain"

        def end_of_reply(self) -> str:
            return ""

    judge = CachedJudge(Plain(), ResultCache(tmp_path / "cache.sqlite"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"hierarchy\.end_of_text"):
        judge.end_of_reply  # noqa: B018


def test_only_a_whole_text_is_read_with_the_end_marker(tmp_path) -> None:
    """``end_of_text`` ends the text's likelihoods with the marker (``plan`` shows what is
    asked), but a text cut to fit the judge's context is not a whole reply: no marker."""
    from hdeval.scoring.criterion_scorer import CriterionScorer
    from hdeval.scoring.run import Sample
    from hdeval.tree.criteria import CriteriaTree, Criterion

    class Marked:  # ends a reply with <E>
        identity = "marked"

        def end_of_reply(self) -> str:
            return "<E>"

    judge = CachedJudge(Marked(), ResultCache(tmp_path / "cache.sqlite"))  # type: ignore[arg-type]
    tree = CriteriaTree([Criterion("q", "quality", "the text is good")])
    profile = Profile(("mean",), True, False, ("dialogue",), end_of_text=True)
    scorer = CriterionScorer(judge, TaskSpec(), ["likelihood"], True, profile)
    sample = Sample("a", "d", "Conversation history:\nhi\n\nFact: cats purr", " cats purr ")
    planned = scorer.plan([sample], tree)
    assert {p.continuation for p in planned} == {"cats purr<E>"}
    assert scorer._layout("likelihood", "src", "cats", whole=False)[1] == "cats"
    plain = CriterionScorer(judge, TaskSpec(), ["likelihood"], True, Profile(("mean",), True))
    assert {p.continuation for p in plain.plan([sample], tree)} == {"cats purr"}
