"""Criteria decomposition (HD-Eval §2.1, Appendix G.1): growing the criteria tree by one layer.

One node is decomposed at a time: the LLM is asked with the prompt of
:mod:`hdeval.tree.decomposition_prompt`, its reply is parsed by
:mod:`hdeval.tree.decomposition_reply`, and the
children it proposes get unique ids under their parent. Raw replies are cached, so a re-run makes
no LLM call. Nodes already decomposed, by an earlier run or by a person editing the tree, are left
as they are.
"""

from __future__ import annotations

import logging
import re
import sys
import unicodedata
from collections.abc import Iterable
from dataclasses import replace

from hdeval.errors import ConfigError, HDEvalError, JudgeUnavailableError
from hdeval.llm.judge import CachedJudge
from hdeval.tree.criteria import CriteriaTree, Criterion
from hdeval.tree.decomposition_prompt import (
    TEMPLATE_VERSION,
    copies_answer_format,
    decomposition_prompt,
)
from hdeval.tree.decomposition_reply import parse_criteria_list

log = logging.getLogger(__name__)
CACHE_KIND = "decompose"
MAX_SLUG_CHARS = 40


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
        (n, d) for n, d in pairs if slugify(n) not in lineage and not copies_answer_format(n, d)
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
