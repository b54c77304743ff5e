"""Criteria decomposition (HD-Eval §2.1, Appendix G.1): an LLM splits one criterion into finer ones.

One node is decomposed at a time: the prompt gives the task background, the criterion (and its
parent, to keep the hierarchy in view) and asks for at most k sub-criteria as "name: definition"
lines. The reply is parsed leniently (numbered or bulleted lists, markdown bold, headings, "name -
definition", chatter before and after). Raw replies are cached, so a re-run makes no LLM call.
Nodes already decomposed, by an earlier run or by a person editing the tree, are left as they are.
"""

from __future__ import annotations

import logging
import re
import sys
import unicodedata
from collections.abc import Iterable
from dataclasses import replace

from hdeval.criteria import CriteriaTree, Criterion
from hdeval.errors import ConfigError, HDEvalError, JudgeUnavailableError
from hdeval.judge import CachedJudge

log = logging.getLogger(__name__)
TEMPLATE_VERSION = "g1-decompose-v3"
CACHE_KIND = "decompose"
MAX_NAME_WORDS = 24  # small models name criteria with whole questions
MAX_NAME_CHARS = 160
MAX_INLINE_NAME_WORDS = 12  # before a ":" or dash on the same line as the definition
MAX_SLUG_CHARS = 40

# The lines every wording shares: the task, then the criterion to split.
_TASK_LINES = """\
I would like to perform automatic evaluation on the quality of generated text for this task: \
{task}
I would like to evaluate the criterion "{name}": {definition}
"""
_ANSWER_FORMAT = """\
Answer with a numbered list and nothing else, one criterion per line, in the form:
1. <short name>: <one-sentence definition>"""

_TEMPLATE = (
    _TASK_LINES
    + """\
{parent_line}\
Please give me {k} fine-grained evaluation criteria, narrower than "{name}", that together \
evaluate it. I want to obtain a final comprehensive evaluation based on an overall aggregation of \
the fine-grained criteria.
"""
    + _ANSWER_FORMAT
)

# Asked when the first wording yields nothing new: a small judge that echoes the node under the
# first wording (typically below layer 2) often splits it under this one, and vice versa.
_ALTERNATE_TEMPLATE = (
    _TASK_LINES
    + """\
Please give me {k} fine-grained evaluation criteria that are narrower parts of "{name}". \
Do not repeat "{name}" itself.
"""
    + _ANSWER_FORMAT
)

# Asked last: small models (the 1.5B Coder most of all) copy the answer format's placeholder
# line literally, so this wording describes the format in words instead of showing it.
_PLAIN_TEMPLATE = (
    _TASK_LINES
    + """\
{parent_line}\
Please give me {k} fine-grained evaluation criteria that are narrower parts of "{name}".
Write them as a numbered list and nothing else. On each line write the number, then the \
criterion's own name in a few words, a colon, and one sentence saying what to check."""
)
_WORDINGS = (_TEMPLATE, _ALTERNATE_TEMPLATE, _PLAIN_TEMPLATE)

_PARENT_LINE = 'It is one part of the broader criterion "{name}": {definition}\n'
# Names copied from the answer format rather than criteria ("<short name>", "criterion 2").
_PLACEHOLDER = re.compile(r"[<>]|\bcriterion\s*\d+\b|^short name$", re.I)
_PLACEHOLDER_DEFINITION = re.compile(r"^(?:one-sentence )?definition\.?$", re.I)

# Names that mark chatter lines, never criteria ("Note: ...", "In summary: ...").
_NOT_NAMES = frozenset(
    [
        *("note", "notes", "nb", "summary", "conclusion", "overall", "example", "examples"),
        *("explanation", "definition", "definitions", "description", "criteria", "criterion"),
        *("sub-criteria", "subcriteria", "answer", "output", "response", "reply", "important"),
        *("tip", "tips", "remember", "warning", "total", "score", "scores", "scoring", "rating"),
        *("weight", "weights", "evaluation", "in summary", "in conclusion"),
        *("fine-grained criteria", "evaluation criteria"),
    ]
)
# First words of chatter ("Here are the criteria: ...", "Sure, these are ...: ...").
_CHATTER_STARTS = frozenset(
    [
        *("here", "sure", "certainly", "okay", "ok", "below", "following", "these", "this"),
        *("i", "we", "you", "let", "hope", "feel", "of"),
    ]
)
_DASHES = "-\u2013\u2014"  # hyphen, en dash, em dash
_QUOTES = "\"'`\u2018\u2019\u201c\u201d"

_MARKER = re.compile(r"^(?:[-*•+·‣◦]|\(?\d{1,2}[.):]|\(?[a-zA-Z][.)]|#{1,6})\s+")
_HEADING = re.compile(r"^#{1,6}\s+")
_BOLD = re.compile(r"^(\*\*|__)(.+?)\1(.*)$")
_LABEL = re.compile(r"^(?:sub-?)?criteri(?:on|a)\s*\d+\s*[:.)\-\u2013\u2014]\s*", re.I)
_DEF_LABEL = re.compile(
    r"^[*_]*(?:definition|description|meaning)[*_]*\s*[:\-\u2013\u2014]\s*", re.I
)
_SEPARATORS = (":", " -- ", *(f" {dash} " for dash in _DASHES))


# ---------------------------------------------------------------------- prompt
def decomposition_prompt(
    task_description: str,
    node: Criterion,
    parent: Criterion | None,
    k: int,
    wording: int = 0,
) -> str:
    """The Appendix G.1 decomposition prompt for one ``node`` (with its ``parent``, if any).

    ``wording`` 0 is the paper's; 1 and 2 are the rewordings tried when it yields nothing new.
    """
    if k < 1:
        raise ConfigError(f"child count k must be >= 1, got {k}")
    parent_line = (
        ""
        if parent is None
        else _PARENT_LINE.format(name=parent.name, definition=parent.definition)
    )
    if wording not in range(len(_WORDINGS)):
        raise ConfigError(f"decomposition wording must be 0 to {len(_WORDINGS) - 1}, got {wording}")
    return _WORDINGS[wording].format(
        task=task_description.strip(),
        name=node.name,
        definition=node.definition.strip(),
        parent_line=parent_line,
        k=k,
    )


# ---------------------------------------------------------------------- parsing
def _indent(line: str) -> int:
    prefix = line[: len(line) - len(line.lstrip())]
    return len(prefix.expandtabs(4))


def _strip_marker(text: str) -> tuple[str, bool]:
    """Remove list markers, heading marks and "Criterion 2:" labels; say whether there were any."""
    body = text
    for _ in range(3):  # "### 1. Name" carries two markers
        body = _MARKER.sub("", body, count=1).strip()
    body = _LABEL.sub("", body, count=1).strip()
    return body, body != text


def _clean(text: str) -> str:
    """Drop emphasis marks, quotes, backticks and one pair of angle brackets around a piece of
    text (a judge that copies the answer format writes "<Accuracy>: <definition>")."""
    text = text.strip().strip("*_" + _QUOTES).strip()
    if text.startswith("<") and text.endswith(">") and not re.search(r"[<>]", text[1:-1]):
        text = text[1:-1].strip()
    return re.sub(r"\s+", " ", text)


def _split(text: str) -> tuple[str, str | None]:
    """Split "name: definition" (or bold / dash variants); definition None if no separator."""
    bold = _BOLD.match(text)
    if bold:
        name, rest = bold.group(2), bold.group(3).strip()
        if name.rstrip().endswith(":"):
            return _clean(name.rstrip()[:-1]), _clean(rest)
        if rest[:1] and rest[:1] in ":" + _DASHES:
            return _clean(name), _clean(rest.lstrip(": " + _DASHES))
        return _clean(name), (_clean(rest) if rest else None)
    for separator in _SEPARATORS:
        if separator in text:
            name, definition = text.split(separator, 1)
            if _is_name(_clean(name), MAX_INLINE_NAME_WORDS):
                return _clean(name), _clean(definition)
    return _clean(text), None


def _is_name(name: str, max_words: int = MAX_NAME_WORDS) -> bool:
    """Whether ``name`` looks like a criterion name rather than a sentence of chatter."""
    words = name.split()
    return (
        0 < len(name) <= MAX_NAME_CHARS
        and len(words) <= max_words
        and any(ch.isalpha() for ch in name)
        and "!" not in name
        and name.lower().rstrip(".") not in _NOT_NAMES
        and words[0].lower().strip(",.") not in _CHATTER_STARTS
    )


def _definition(text: str) -> str:
    """A definition line, minus a leading "Definition:" label."""
    return _clean(_DEF_LABEL.sub("", text.strip(), count=1))


def _pairs(reply: str) -> Iterable[tuple[str, str]]:
    """(name, definition) pairs in reply order, before validation and de-duplication."""
    lines = [(_indent(raw), raw.strip()) for raw in reply.splitlines() if raw.strip()]
    item_indents = [i for i, text in lines if _strip_marker(text)[1]]
    top = min(item_indents, default=min((i for i, _ in lines), default=0))
    pending: str | None = None  # a name still waiting for its definition on the next line
    for indent, text in lines:
        body, marked = _strip_marker(text)
        nested = indent > top and not _HEADING.match(text)
        if pending is not None and (nested or not marked or _DEF_LABEL.match(body)):
            yield pending, _definition(body)
            pending = None
            continue
        if nested:
            continue  # sub-bullets of an item that already has its definition
        name, definition = _split(body)
        if definition:
            yield name, definition
            pending = None
        elif _is_name(name) and (marked or _BOLD.match(body)) and not name.endswith((":", ".")):
            pending = name
        else:
            pending = None


def parse_criteria_list(reply: str, k: int, node_id: str | None = None) -> list[tuple[str, str]]:
    """At most ``k`` (name, definition) pairs from an LLM reply, names unique ignoring case.

    Raises :class:`~hdeval.errors.HDEvalError` naming ``node_id`` when nothing usable is found.
    """
    seen: set[str] = set()
    found: list[tuple[str, str]] = []
    for name, definition in _pairs(reply or ""):
        key = name.casefold()
        if not _is_name(name) or len(definition) < 3 or key in seen:
            continue
        seen.add(key)
        found.append((name, definition))
    if not found:
        where = f" for criterion {node_id!r}" if node_id else ""
        snippet = re.sub(r"\s+", " ", (reply or "").strip())[:200]
        raise HDEvalError(
            f"no 'name: definition' criteria found in the decomposition reply{where}: {snippet!r}"
        )
    return found[:k]


# ---------------------------------------------------------------------- tree expansion
def slugify(name: str) -> str:
    """A lowercase ascii identifier: "Sentence ordering" -> "sentence_ordering"."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "_", ascii_name.lower()).strip("_")
    return slug[:MAX_SLUG_CHARS].rstrip("_") or "criterion"


def _unique_id(parent_id: str, name: str, taken: set[str]) -> str:
    base = f"{parent_id}.{slugify(name)}"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    taken.add(candidate)
    return candidate


def decompose_node(
    tree: CriteriaTree,
    node: Criterion,
    judge: CachedJudge,
    task_description: str,
    k: int,
    template_version: str = TEMPLATE_VERSION,
    max_new_tokens: int = 512,
) -> list[Criterion]:
    """The children the LLM proposes for ``node`` (ids not yet unique against the tree).

    Greedy decoding gives one reply per prompt, and a small judge asked for few items sometimes
    only repeats the node or copies the answer format. The request is then repeated in the
    alternate wording, then both again asking for ``k + 2`` items (of which the first ``k`` new
    ones are kept), then in a third wording that shows no answer-format placeholder, for ``k``
    and ``k + 2``; the error naming the node comes only when every attempt fails. Earlier
    attempts keep their order, so trees and cached replies that parsed before are unchanged.
    Raw replies are cached whether or not they parse (they are what the judge says to that
    prompt) and are parsed again on every run, so a re-run makes no LLM call and a better parser
    applies to old replies.
    """
    problems = []
    attempts = [(k, 0), (k, 1), (k + 2, 0), (k + 2, 1), (k, 2), (k + 2, 2)]
    for ask, wording in attempts:
        prompt = decomposition_prompt(task_description, node, tree.parent(node), ask, wording)
        reply = judge.reply(CACHE_KIND, prompt, max_new_tokens, template_version)
        try:
            every = parse_criteria_list(reply, sys.maxsize, node_id=node.id)
            pairs = _new_pairs(tree, node, every)[:k]  # drop echoes of the node first, then cut
        except HDEvalError as exc:
            problems.append(f"asked for {ask}: {exc}")
            continue
        return [
            Criterion(id="", name=n, definition=d, parent=node.id, layer=node.layer + 1)
            for n, d in pairs
        ]
    raise HDEvalError(
        f"no usable decomposition of criterion {node.id!r} after {len(problems)} attempts: "
        + "; ".join(problems)
    )


def _new_pairs(
    tree: CriteriaTree, node: Criterion, pairs: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Drop proposed children that merely repeat the node or one of its ancestors."""
    lineage, current = set(), node
    while current is not None:
        lineage.add(slugify(current.name))
        current = tree.parent(current)
    kept = [
        (n, d)
        for n, d in pairs
        if slugify(n) not in lineage
        and not _PLACEHOLDER.search(n)
        and not _PLACEHOLDER_DEFINITION.match(d)
    ]
    if not kept:
        raise HDEvalError(
            f"the decomposition reply for criterion {node.id!r} only repeats the criterion, "
            f"its parents or the answer format: {[n for n, _ in pairs]}"
        )
    return kept


def decompose(
    tree: CriteriaTree,
    node_ids: Iterable[str],
    judge: CachedJudge,
    task_description: str,
    k: int,
    template_version: str = TEMPLATE_VERSION,
    max_new_tokens: int = 512,
) -> CriteriaTree:
    """A new tree in which each listed node not yet decomposed gets at most ``k`` children.

    A node counts as decomposed when its ``decomposed`` flag is set or it already has children
    (say, added by hand); such nodes are kept as they are. Children get ids
    ``<parent id>.<slug of name>`` (made unique), ``layer = parent.layer + 1``, and the parent is
    marked ``decomposed=True``. Replies are cached under
    ``judge.key("decompose", template_version, prompt)``.

    A node the judge cannot decompose stays a leaf (undecomposed, logged as a warning, listed
    by :func:`undecomposed`); when no requested node gets any child, the new layer would be
    empty and :class:`~hdeval.errors.HDEvalError` names every node and why.
    """
    nodes = list(tree.criteria)
    taken = {c.id for c in nodes}
    attempted, problems = 0, []
    for node_id in dict.fromkeys(node_ids):
        try:
            node = tree.get(node_id)
        except KeyError:
            raise ConfigError(f"cannot decompose {node_id!r}: no such criterion") from None
        if node.decomposed or tree.children(node.id):
            continue
        attempted += 1
        try:
            children = decompose_node(
                tree, node, judge, task_description, k, template_version, max_new_tokens
            )
        except JudgeUnavailableError:
            raise
        except HDEvalError as exc:
            log.warning("criterion %r stays a leaf: %s", node.id, exc)
            problems.append(str(exc))
            continue
        index = next(i for i, c in enumerate(nodes) if c.id == node.id)
        nodes[index] = replace(node, decomposed=True)
        nodes.extend(replace(c, id=_unique_id(node.id, c.name, taken)) for c in children)
    if attempted and len(problems) == attempted:
        raise HDEvalError("the new layer would be empty: " + " | ".join(problems))
    return CriteriaTree(nodes)


def undecomposed(tree: CriteriaTree, node_ids: Iterable[str]) -> list[str]:
    """Those of ``node_ids`` that have no children (the judge could not decompose them)."""
    return [n for n in node_ids if not tree.children(n)]
