"""Signal families on the real embedded judge, a few texts each: the columns they give move
the way the text moves (an invented sentence, a text cut in half, a text that loops, a response
that uses its fact), and a malformed meaning representation is refused naming the row."""

from __future__ import annotations

import math

import pytest

from hdeval.errors import HDEvalError
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.params import TaskSpec
from hdeval.scoring.columns import Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.family_columns import FAMILY_COLUMNS
from hdeval.scoring.run import Sample
from hdeval.tree.criteria import CriteriaTree, Criterion

pytestmark = pytest.mark.model
TREE = CriteriaTree([Criterion("quality", "quality", "the text is good")])
ALIENS = " Aliens landed on the roof of the stadium on Tuesday and were greeted by the mayor ."


def _scorer(backend, tmp_path, families, task=TaskSpec()) -> CriterionScorer:
    judge = CachedJudge(backend, ResultCache(tmp_path / "cache.sqlite"))
    profile = Profile(("mean",), True, False, tuple(families))
    return CriterionScorer(judge, task, ["likelihood"], True, profile)


def test_sentences_and_coverage_move_with_the_text(embedded_backend, summeval_rows, tmp_path):
    row = summeval_rows[0]
    words = row["output"].split()
    texts = {
        "whole": row["output"],
        "aliens": row["output"] + ALIENS,
        "half": " ".join(words[: len(words) // 2]),
        "looped": row["output"] + (" " + " ".join(words[:12])) * 2,
    }
    samples = [
        Sample(k, "d", row["source"], v, tuple(row["references"][:1])) for k, v in texts.items()
    ]
    families = ["coverage", "sentences", "repetition", "references"]
    run = _scorer(embedded_backend, tmp_path, families).score(samples, TREE, progress=False)
    assert run.failures == []
    table = run.features
    for column in (c for f in families for c in FAMILY_COLUMNS[f]):
        assert all(math.isfinite(v) for v in table[column]), column
    assert table.loc["aliens", "len.sents:_text"] == table.loc["whole", "len.sents:_text"] + 1
    assert table.loc["aliens", "spmi.min:_text"] < table.loc["whole", "spmi.min:_text"]
    assert table.loc["half", "cov:_text"] < table.loc["whole", "cov:_text"]
    assert table.loc["half", "ref.covers:_text"] < table.loc["whole", "ref.covers:_text"]
    repeated = table["rep.trigrams:_text"]
    assert repeated["looped"] > repeated["whole"] + 0.1


def test_dialogue_pmi_rises_with_the_fact_used_and_the_last_turn_answered_not_echoed(
    embedded_backend, tmp_path
):
    source = (
        "Conversation history:\ndo you like football ?\n"
        "i love it , i watch every game . which team do you support ?\n\n"
        "Fact: the new england patriots have won six super bowls ."
    )
    texts = {
        "used": "i support the patriots , they have won six super bowls .",
        "generic": "that is nice , i like it too .",
        "off": "i had pasta with tomato sauce for dinner last night .",
        "echo": "i love it , i watch every game .",
    }
    task = TaskSpec(output_noun="response", source_noun="dialogue context")
    run = _scorer(embedded_backend, tmp_path, ["dialogue"], task).score(
        [Sample(k, "d", source, v) for k, v in texts.items()], TREE, progress=False
    )
    assert run.failures == []
    table = run.features
    assert table.loc["used", "pmi:_fact"] > table.loc["generic", "pmi:_fact"]
    assert table.loc["used", "pmi:_last"] > table.loc["off", "pmi:_last"]
    assert table.loc["echo", "rep.history:_text"] == 1.0  # says again what was just said
    assert (table["fact.none:_text"] == 0.0).all()  # the context gives a fact
    assert table.loc["used", "rep.history:_text"] < 0.2


def test_slots_read_the_meaning_representation_and_refuse_a_malformed_one(
    embedded_backend, tmp_path
):
    mr = "inform(name='red door cafe';food=chinese;area=dont_care)"
    scorer = _scorer(embedded_backend, tmp_path, ["slots"])
    run = scorer.score(
        [Sample("all", "d", mr, "red door cafe serves chinese food ."),
         Sample("one", "d", mr, "red door cafe is a nice place .")],
        TREE, progress=False,
    )  # fmt: skip
    assert run.features.loc["all", "slots.realised:_text"] == 1.0
    assert run.features.loc["one", "slots.omitted:_text"] == 1.0
    with pytest.raises(HDEvalError, match=r"sample 'bad'.*meaning representation"):
        scorer.score([Sample("bad", "d", "red door cafe", "a text .")], TREE, progress=False)


def test_wording_falls_where_the_words_around_the_values_go_wrong(embedded_backend, tmp_path):
    """SFHOT's commonest faults are in the words a system wraps around the values it copies
    ("He inn at the presidio", "a hotel called in the"): the wording's likelihood given the
    source falls for them below a correct sentence's, while a value copied after a wrong word
    shows as the least likely value token."""
    task = TaskSpec(
        description="data-to-text generation. A sentence expresses a meaning representation",
        source_label="Meaning representation", output_label="Sentence",
        output_noun="sentence", source_noun="meaning representation",
    )  # fmt: skip
    mr = "inform(name='inn at the presidio';near='presidio';pricerange=moderate)"
    texts = {
        "good": "The inn at the presidio is near presidio and is moderately priced .",
        "he": "He inn at the presidio is near presidio and is moderately priced .",
        "called": "There is a hotel called in the inn at the presidio near presidio and is "
        "moderately priced .",
        "question": "What part of the city are you looking for ?",
    }
    scorer = _scorer(embedded_backend, tmp_path, ["wording"], task)
    run = scorer.score([Sample(k, "d", mr, v) for k, v in texts.items()], TREE, progress=False)
    table = run.features
    assert list(table.columns[-7:]) == list(FAMILY_COLUMNS["wording"])
    for broken in ("he", "called"):
        assert table.loc[broken, "word.given:_text"] < table.loc["good", "word.given:_text"] - 0.5
        assert table.loc[broken, "vals.given.min:_text"] < table.loc["good", "vals.given.min:_text"]
    assert table.loc["question", "vals.given.min:_text"] == 0.0  # no value to copy


def test_a_text_read_as_a_whole_reply_is_unlikely_where_it_stops_mid_sentence(
    embedded_backend, summeval_rows, tmp_path
):
    """With ``end_of_text`` the judge's end-of-reply marker follows the text: a summary cut
    mid-sentence ends where the judge expects none (its least likely token is that end), and
    its mean likelihood falls below the whole text's, which the end costs far less; without it
    the cut text's tokens are the whole text's first ones, so its least likely token can be no
    lower than the whole's."""
    row = summeval_rows[0]
    words = row["output"].split()
    cut = " ".join(words[: len(words) // 2]).rstrip(" .")
    samples = [
        Sample(k, "d", row["source"], v) for k, v in (("whole", row["output"]), ("cut", cut))
    ]
    tables = {}
    for end_of_text in (False, True):
        judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))
        profile = Profile(("mean", "min"), True, False, ("sentences",), end_of_text)
        scorer = CriterionScorer(judge, TaskSpec(), ["likelihood"], True, profile)
        tables[end_of_text] = scorer.score(samples, TREE, progress=False).features
    plain, ended = tables[False], tables[True]
    assert judge.end_of_reply == "<|im_end|>"
    assert plain.loc["cut", "lik.min:_text"] >= plain.loc["whole", "lik.min:_text"] - 1e-6
    assert ended.loc["cut", "lik.min:_text"] < ended.loc["whole", "lik.min:_text"] - 2
    assert ended.loc["cut", "lik:_text"] < ended.loc["whole", "lik:_text"]
    cost = {k: plain.loc[k, "lik:_text"] - ended.loc[k, "lik:_text"] for k in ("whole", "cut")}
    assert cost["cut"] > 2 * cost["whole"]  # the end costs the cut text most
