"""Criteria decomposition: prompt, reply parser, tree expansion with a canned stand-in backend."""

from __future__ import annotations

import pytest

from hdeval.errors import ConfigError, HDEvalError
from hdeval.llm.cache import ResultCache, cache_key
from hdeval.llm.judge import CachedJudge
from hdeval.tree.criteria import CriteriaTree, Criterion
from hdeval.tree.decompose import decompose, slugify, undecomposed
from hdeval.tree.decomposition_prompt import TEMPLATE_VERSION, decomposition_prompt
from hdeval.tree.decomposition_reply import parse_criteria_list

TASK = (
    "text summarization. A summary is a shorter passage that covers the key details of an article."
)

# The reply of the embedded Qwen2.5-Coder-0.5B-Instruct (greedy, 256 new tokens) to
# decomposition_prompt(TASK-like summarization task, Coherence, None, 4): question-like bold names,
# definitions on nested "**Definition:**" bullets, blank lines between items.
SMALL_MODEL_REPLY = """\
1. **How well does the summary structure and coherence of the text contribute to its overall quality?**
   - **Definition:** The summary structure and coherence of the text contribute to its overall quality by providing a clear and concise overview of the main points of the news article. This is crucial for understanding the content and the overall meaning of the text.

2. **How well does the summary cover the key details of the news article?**
   - **Definition:** The summary covers the key details of the news article by providing a comprehensive overview of the main points. This is essential for understanding the content and the overall meaning of the text.

3. **How well does the summary summarize the main points of the news article?**
   - **Definition:** The summary summarizes the main points of the news article by providing a concise overview of the key details. This is essential for understanding the content and the overall meaning of the text.

4. **How well does the summary provide a clear and concise overview of the main points of the news article?**
   - **Definition:** The summary provides a clear and concise overview of the main points of the news article by providing a concise overview of the key details. This is essential for understanding the content and the overall meaning of the text."""  # noqa: E501

# The same model answering an earlier wording of the prompt by repeating the criterion.
ECHO_REPLY = (
    "Coherence: the collective quality of all sentences; "
    "the summary should be well-structured and well-organized."
)

ORDER = ("Sentence ordering", "how well the sentences follow a natural and logical order.")
FOCUS = ("Topic focus", "how well the summary keeps one topic throughout.")
LINKS = ("Discourse markers", "how well connectives signal the relations between sentences.")

PARSER_CASES = {
    "plain": (f"{ORDER[0]}: {ORDER[1]}\n{FOCUS[0]}: {FOCUS[1]}", [ORDER, FOCUS]),
    "numbered dot": (f"1. {ORDER[0]}: {ORDER[1]}\n2. {FOCUS[0]}: {FOCUS[1]}", [ORDER, FOCUS]),
    "numbered paren": (f"1) {ORDER[0]}: {ORDER[1]}\n2) {FOCUS[0]}: {FOCUS[1]}", [ORDER, FOCUS]),
    "dash bullets": (f"- {ORDER[0]}: {ORDER[1]}\n- {FOCUS[0]}: {FOCUS[1]}", [ORDER, FOCUS]),
    "star bullets": (f"* {ORDER[0]}: {ORDER[1]}\n* {FOCUS[0]}: {FOCUS[1]}", [ORDER, FOCUS]),
    "dot bullets": (f"• {ORDER[0]}: {ORDER[1]}\n• {FOCUS[0]}: {FOCUS[1]}", [ORDER, FOCUS]),
    "bold outside colon": (
        f"1. **{ORDER[0]}**: {ORDER[1]}\n2. **{FOCUS[0]}**: {FOCUS[1]}",
        [ORDER, FOCUS],
    ),
    "bold inside colon": (
        f"- **{ORDER[0]}:** {ORDER[1]}\n- **{FOCUS[0]}:** {FOCUS[1]}",
        [ORDER, FOCUS],
    ),
    "name dash definition": (
        f"{ORDER[0]} - {ORDER[1]}\n{FOCUS[0]} \u2013 {FOCUS[1]}",
        [ORDER, FOCUS],
    ),
    "headings with definition lines": (
        f"### 1. {ORDER[0]}\n{ORDER[1]}\n\n### 2. {FOCUS[0]}\nDefinition: {FOCUS[1]}",
        [ORDER, FOCUS],
    ),
    "blank lines and chatter": (
        "Sure! Here are some fine-grained criteria for coherence:\n\n"
        f"1. {ORDER[0]}: {ORDER[1]}\n\n2. {FOCUS[0]}: {FOCUS[1]}\n\n"
        "Note: these criteria can be weighted to give an overall score.\n"
        "I hope this helps!",
        [ORDER, FOCUS],
    ),
    "nested sub-bullets ignored": (
        f"1. **{ORDER[0]}**: {ORDER[1]}\n   - Example: first the event, then its aftermath.\n"
        f"2. **{FOCUS[0]}**: {FOCUS[1]}\n   - Check: no unrelated asides.",
        [ORDER, FOCUS],
    ),
    "criterion labels": (
        f"Criterion 1: {ORDER[0]}: {ORDER[1]}\nCriterion 2: {FOCUS[0]}: {FOCUS[1]}",
        [ORDER, FOCUS],
    ),
    "duplicates ignoring case": (
        f"1. {ORDER[0]}: {ORDER[1]}\n2. {ORDER[0].upper()}: repeated.\n3. {FOCUS[0]}: {FOCUS[1]}",
        [ORDER, FOCUS],
    ),
    "truncated to k": (
        f"1. {ORDER[0]}: {ORDER[1]}\n2. {FOCUS[0]}: {FOCUS[1]}\n3. {LINKS[0]}: {LINKS[1]}",
        [ORDER, FOCUS],
    ),
}


@pytest.mark.parametrize("case", sorted(PARSER_CASES))
def test_parser_formats(case: str) -> None:
    reply, expected = PARSER_CASES[case]
    assert parse_criteria_list(reply, k=2) == expected


def test_parser_reads_small_model_reply() -> None:
    pairs = parse_criteria_list(SMALL_MODEL_REPLY, k=4)
    assert [name for name, _ in pairs] == [
        "How well does the summary structure and coherence of the text contribute to its "
        "overall quality?",
        "How well does the summary cover the key details of the news article?",
        "How well does the summary summarize the main points of the news article?",
        "How well does the summary provide a clear and concise overview of the main points of "
        "the news article?",
    ]
    assert all(d.startswith("The summary") and d.endswith("meaning of the text.") for _, d in pairs)
    assert not any("Definition" in d or "*" in d for _, d in pairs)


def test_parser_drops_an_item_cut_off_by_the_token_limit() -> None:
    cut = SMALL_MODEL_REPLY[: SMALL_MODEL_REPLY.index("4. **How well") + 40]
    names = [name for name, _ in parse_criteria_list(cut, k=4)]
    assert len(names) == 3 and names[-1].startswith("How well does the summary summarize")


@pytest.mark.parametrize(
    "reply",
    ["", "   \n\n", "I cannot help with that.", "1.\n2.\n3.", "Note: nothing to add.\n- \n*"],
)
def test_parser_error_names_the_node(reply: str) -> None:
    with pytest.raises(HDEvalError, match=r"coherence\.ord"):
        parse_criteria_list(reply, k=4, node_id="coherence.ord")


# ---------------------------------------------------------------------- decompose()
class CannedBackend:
    """A deterministic stand-in backend: replies with canned text, counts generate calls."""

    identity = "canned:v1"

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies  # criterion name -> reply
        self.prompts: list[str] = []

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        self.prompts.append(prompt)
        for name, reply in self.replies.items():
            if f'evaluate the criterion "{name}"' in prompt:
                return reply
        return ""


def _tree() -> CriteriaTree:
    return CriteriaTree(
        [
            Criterion("coherence", "Coherence", "the collective quality of all sentences."),
            Criterion("fluency", "Fluency", "the quality of individual sentences."),
            Criterion("relevance", "Relevance", "selection of important content.", decomposed=True),
            Criterion("relevance.cov", "Coverage", "key points covered.", "relevance", 2),
        ]
    )


REPLIES = {
    "Coherence": f"1. {ORDER[0]}: {ORDER[1]}\n2. {FOCUS[0]}: {FOCUS[1]}\n3. {LINKS[0]}: {LINKS[1]}",
    "Fluency": "- Grammar: how well the grammar is correct.\n- Spelling: how well words are spelt.",
    "Relevance": "- Should not be asked: never.",
    "Sentence ordering": "1. Sentence-ordering: x y z\n2. Time order: how well events follow time.",
}


def test_prompt_names_task_node_parent_and_k() -> None:
    tree = _tree()
    node = tree.get("relevance.cov")
    prompt = decomposition_prompt(TASK, node, tree.parent(node), 4)
    for part in (TASK, "Coverage", "key points covered.", "Relevance", "give me 4"):
        assert part in prompt
    assert "broader criterion" not in decomposition_prompt(TASK, tree.get("fluency"), None, 3)


def test_decompose_expands_marks_and_caches(tmp_path) -> None:
    cache = ResultCache(tmp_path / "cache.sqlite")
    backend = CannedBackend(REPLIES)
    tree = decompose(
        _tree(),
        ["coherence", "fluency", "relevance"],
        CachedJudge(backend, cache),
        TASK,
        k=2,
        template_version=TEMPLATE_VERSION,
    )

    assert len(backend.prompts) == 2  # relevance is already decomposed: never asked
    assert [c.id for c in tree.children("coherence")] == [
        "coherence.sentence_ordering",
        "coherence.topic_focus",
    ]
    assert [c.id for c in tree.children("fluency")] == ["fluency.grammar", "fluency.spelling"]
    assert [c.id for c in tree.children("relevance")] == ["relevance.cov"]
    for child in tree.children("coherence") + tree.children("fluency"):
        assert child.layer == 2 and not child.decomposed
    assert tree.get("coherence").decomposed and tree.get("fluency").decomposed
    assert tree.get("relevance") == _tree().get("relevance")
    assert tree.get("coherence.sentence_ordering").definition == ORDER[1]

    prompt = backend.prompts[0]
    key = cache_key("decompose", backend.identity, TEMPLATE_VERSION, prompt)
    assert cache.get(key) == {"reply": REPLIES["Coherence"]}
    assert cache.info()["results"] == {"decompose": 2}

    # Second run from the undecomposed tree: same result, zero LLM calls.
    again = CannedBackend(REPLIES)
    tree2 = decompose(
        _tree(),
        ["coherence", "fluency"],
        CachedJudge(again, cache),
        TASK,
        k=2,
        template_version=TEMPLATE_VERSION,
    )
    assert again.prompts == []
    assert tree2.criteria == tree.criteria

    # Decomposing the decomposed tree again changes nothing.
    assert (
        decompose(tree, ["coherence"], CachedJudge(again, cache), TASK, k=2).criteria
        == tree.criteria
    )
    assert again.prompts == []


def test_decompose_layer_three_with_unique_ids_and_yaml_roundtrip(tmp_path) -> None:
    cache = ResultCache(tmp_path / "cache.sqlite")
    backend = CannedBackend(REPLIES)
    tree = decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=2)
    tree = decompose(tree, ["coherence.sentence_ordering"], CachedJudge(backend, cache), TASK, k=1)
    kids = tree.children("coherence.sentence_ordering")
    # "Sentence-ordering" repeats the node's own name and is dropped.
    assert [(c.id, c.layer) for c in kids] == [("coherence.sentence_ordering.time_order", 3)]
    assert 'broader criterion "Coherence"' in backend.prompts[-1]
    path = tmp_path / "criteria.yaml"
    tree.to_yaml(path)
    assert CriteriaTree.from_yaml(path).fingerprint() == tree.fingerprint()


def test_decompose_bad_reply_names_node_and_rerun_makes_no_llm_call(tmp_path) -> None:
    cache = ResultCache(tmp_path / "cache.sqlite")
    backend = CannedBackend({"Coherence": "Sorry, I cannot do that."})
    with pytest.raises(HDEvalError, match=r"empty.*'coherence'"):
        decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=4)
    assert len(backend.prompts) == 6  # k and k + 2 items, in each of the three wordings
    with pytest.raises(HDEvalError, match="'coherence'"):
        decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=4)
    assert len(backend.prompts) == 6  # raw replies are cached; only the parse is repeated


def test_decompose_keeps_a_node_it_cannot_split_as_a_leaf(tmp_path) -> None:
    cache = ResultCache(tmp_path / "cache.sqlite")
    backend = CannedBackend(
        {"Coherence": "Sorry.", "Fluency": "1. Grammar: no grammar errors.\n2. Spelling: none."}
    )
    tree = decompose(_tree(), ["coherence", "fluency"], CachedJudge(backend, cache), TASK, k=2)
    assert undecomposed(tree, ["coherence", "fluency"]) == ["coherence"]
    assert not tree.get("coherence").decomposed and tree.get("fluency").decomposed

    echo = CannedBackend({"Coherence": ECHO_REPLY})
    with pytest.raises(HDEvalError, match=r"'coherence'.*only repeats"):
        decompose(_tree(), ["coherence"], CachedJudge(echo, cache), TASK, k=4)


def test_decompose_unknown_node_and_slugs(tmp_path) -> None:
    cache = ResultCache(tmp_path / "cache.sqlite")
    with pytest.raises(ConfigError, match="nope"):
        decompose(_tree(), ["nope"], CachedJudge(CannedBackend({}), cache), TASK, k=2)
    assert slugify("Sentence ordering (ord)") == "sentence_ordering_ord"
    assert slugify("Cohérence!") == "coherence"
    assert slugify("???") == "criterion"


def test_duplicate_slugs_get_suffixes(tmp_path) -> None:
    cache = ResultCache(tmp_path / "cache.sqlite")
    reply = (
        "- Topic focus: how well it stays on topic.\n- Topic-focus: how well, more strictly.\n"
        "- Topic focus!: bad name\n- Topic   FOCUS: duplicate ignoring case and spaces."
    )
    tree = decompose(
        _tree(), ["coherence"], CachedJudge(CannedBackend({"Coherence": reply}), cache), TASK, k=4
    )
    assert [c.id for c in tree.children("coherence")] == [
        "coherence.topic_focus",
        "coherence.topic_focus_2",
    ]


class EchoThenListBackend(CannedBackend):
    """Repeats the node when asked for 2 items, lists real children when asked for more."""

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        self.prompts.append(prompt)
        if "give me 2 fine-grained evaluation criteria, narrower" in prompt:
            return "1. Coherence: the summary is coherent.\n2. Coherence: it is coherent."
        return (
            "1. Order: sentences follow a logical order.\n"
            "2. Focus: one topic throughout.\n3. Flow: smooth."
        )


def test_decompose_asks_for_more_when_the_reply_only_repeats_the_node(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    backend = EchoThenListBackend({})
    tree = decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=2)
    assert [c.name for c in tree.children("coherence")] == ["Order", "Focus"]
    assert len(backend.prompts) == 2  # the second attempt uses the alternate wording
    again = decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=2)
    assert [c.name for c in again.children("coherence")] == ["Order", "Focus"]
    assert len(backend.prompts) == 2  # both replies come from the cache


def test_placeholder_names_copied_from_the_answer_format_are_not_criteria(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    reply = "1. <short name>: <one-sentence definition>\n2. <summary criterion 1>: a criterion."
    backend = CannedBackend({"Coherence": reply})
    with pytest.raises(HDEvalError, match="answer format"):
        decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=2)


class FormatCopyingBackend(CannedBackend):
    """Copies the answer-format line while the prompt shows one (the 1.5B Coder's habit)."""

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        self.prompts.append(prompt)
        if "<short name>" in prompt:
            return "1. <short name>: <one-sentence definition>\n2. <short name>: <definition>"
        return "1. Order: sentences follow a logical order.\n2. Focus: one topic throughout."


def test_a_format_copying_judge_is_asked_last_in_a_wording_without_placeholders(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    backend = FormatCopyingBackend({})
    tree = decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=2)
    assert [c.name for c in tree.children("coherence")] == ["Order", "Focus"]
    assert len(backend.prompts) == 5  # four wordings with the placeholder, then the plain one
    assert all("<short name>" in p for p in backend.prompts[:4])
    assert "<" not in backend.prompts[4] and "give me 2 " in backend.prompts[4]


def test_unknown_decomposition_wording_is_a_config_error():
    node = _tree().get("coherence")
    with pytest.raises(ConfigError, match="wording"):
        decomposition_prompt(TASK, node, None, 2, wording=3)


def test_names_in_angle_brackets_are_unwrapped_and_placeholders_still_refused(tmp_path):
    """The 1.5B model copies the format's brackets around real criteria (its actual reply)."""
    cache = ResultCache(tmp_path / "c.sqlite")
    reply = (
        "1. <relevance>: The summary accurately reflects the content of the original article.\n"
        "2. <accuracy>: <the summary should capture the main points of the original article>\n"
        "3. <sentence coherence>: <one-sentence definition>"
    )
    backend = CannedBackend({"Coherence": reply})
    grown = decompose(_tree(), ["coherence"], CachedJudge(backend, cache), TASK, k=3)
    children = grown.children("coherence")
    assert [c.name for c in children] == ["relevance", "accuracy"]
    assert (
        children[1].definition
        == "the summary should capture the main points of the original article"
    )
