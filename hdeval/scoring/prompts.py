"""Prompt templates: hierarchy-aware criterion prompts and GPTScore-style likelihood instructions.

Prompts are laid out so the longest shared part comes first and is computed once: the source
document, then the text under evaluation, then the criterion. Every segment ends with a blank
line and every following part starts with a non-space character, so segment boundaries never
split a token. Changing any template text requires bumping :data:`TEMPLATE_VERSION`, which is
part of every cache key.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from hdeval.params import TaskSpec
from hdeval.tree.criteria import CriteriaTree, Criterion

TEMPLATE_VERSION = "hdeval-prompts-4"


def source_segment(task: TaskSpec, source: str) -> str:
    return (
        f"You will be given a {task.source_noun} and a {task.output_noun} written for it.\n\n"
        f"## {task.source_label}\n{source.strip()}\n\n"
    )


def source_free_segment(task: TaskSpec) -> str:
    """What the judge reads before a text when its likelihood is scored without the source:
    the task alone (:func:`source_free_instruction` follows)."""
    return f"The task is {task.description.strip().rstrip('.')}.\n\n"


def output_segment(task: TaskSpec, output: str) -> str:
    """The text under evaluation and the criterion-independent rating instructions.

    Everything that does not name a criterion lives here, in the part shared by all criteria of
    a sample, so the per-criterion suffix is only the metric and its ancestors. The judge rates
    on 1-5 whatever the human scale of the aspect: the aggregator maps to the aspect's scale.
    """
    return (
        f"## {task.output_label}\n{output.strip()}\n\n"
        f"## Instructions\nScore the {task.output_noun} above on the metric below, on a scale of "
        "1 to 5, with 1 being the lowest and 5 the highest. Reply with the score only, a single "
        "digit.\n\n"
    )


def prompt_segments(task: TaskSpec, source: str, output: str) -> list[str]:
    """Shared segments of a prompt-mode request: source document, then text + instructions."""
    return [source_segment(task, source), output_segment(task, output)]


def criterion_prompt(task: TaskSpec, lineage: Sequence[Criterion]) -> str:
    """Hierarchy-aware metric (HD-Eval Appendix G.2) of the last criterion of ``lineage``.

    ``lineage`` runs from the human aspect at the root down to the criterion scored (see
    :meth:`~hdeval.tree.criteria.CriteriaTree.lineage`). The root aspect and every intermediate
    criterion are stated with their definitions, then the criterion itself: the judge scores the
    child knowing which parent it details, as in the paper.
    """
    *ancestors, criterion = _checked(lineage)
    lines = []
    for depth, node in enumerate(ancestors):
        head = "Aspect" if depth == 0 else f"Part of {ancestors[depth - 1].name}"
        lines.append(f"{head}: {node.name}: {node.definition}")
    if ancestors:
        lines.append(
            f"To evaluate the {ancestors[-1].name} of the {task.output_noun}, score this metric:"
        )
    lines.append(f"Metric: {criterion.name}: {criterion.definition}")
    return "\n".join(lines) + "\nScore (1-5):"


def likelihood_instruction(task: TaskSpec, lineage: Sequence[Criterion] = ()) -> str:
    """GPTScore-style instruction; the text under evaluation is then scored as the reply.

    Without a lineage it names no criterion (the unconditioned likelihood); otherwise the root
    aspect, each intermediate criterion and the criterion, each with its definition.
    """
    base = f"## Instructions\nWrite a {task.output_noun} for the {task.source_noun} above"
    if not lineage:
        return base + "."
    root, *rest = _checked(lineage)
    text = f"{base} that is excellent in {root.name} ({root.definition})"
    for depth, node in enumerate(rest):
        link = "in particular in" if depth == 0 else "and within that in"
        text += f", {link} {node.name} ({node.definition})"
    return text + "."


def source_free_instruction(task: TaskSpec) -> str:
    """The instruction of the source-free likelihood: write such a text, with no source given.
    The text's log-probability after it is the judge's prior (how fluent and typical the text
    is); its difference from the likelihood given the source is how much the source explains
    the text (pointwise mutual information)."""
    return f"## Instructions\nWrite a {task.output_noun}."


def _checked(lineage: Sequence[Criterion]) -> list[Criterion]:
    nodes = list(lineage)
    if not nodes:
        raise ValueError("a criterion prompt needs at least the criterion itself")
    for parent, child in pairwise(nodes):
        if child.parent != parent.id:
            raise ValueError(f"{child.id!r} is not a child of {parent.id!r}")
    return nodes


def prompt_for(tree: CriteriaTree, criterion: Criterion, task: TaskSpec) -> str:
    """The prompt-mode suffix of ``criterion``, with its ancestors from ``tree``."""
    return criterion_prompt(task, tree.lineage(criterion))


def likelihood_for(tree: CriteriaTree, criterion: Criterion, task: TaskSpec) -> str:
    """The likelihood instruction of ``criterion``, with its ancestors from ``tree``."""
    return likelihood_instruction(task, tree.lineage(criterion))
