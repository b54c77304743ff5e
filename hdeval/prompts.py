"""Prompt templates: hierarchy-aware criterion prompts and GPTScore-style likelihood instructions.

Prompts are laid out so the longest shared part comes first and is computed once: the source
document, then the text under evaluation, then the criterion. Every segment ends with a blank
line and every following part starts with a non-space character, so segment boundaries never
split a token. Changing any template text requires bumping :data:`TEMPLATE_VERSION`, which is
part of every cache key.
"""

from __future__ import annotations

from hdeval.criteria import CriteriaTree, Criterion
from hdeval.params import TaskSpec

TEMPLATE_VERSION = "hdeval-prompts-2"


def source_segment(task: TaskSpec, source: str) -> str:
    return (
        f"You will be given a {task.source_noun} and a {task.output_noun} of it.\n\n"
        f"## {task.source_label}\n{source.strip()}\n\n"
    )


def output_segment(task: TaskSpec, output: str) -> str:
    """The text under evaluation and the criterion-independent rating instructions.

    Everything that does not name a criterion lives here, in the part shared by all criteria of
    a sample, so the per-criterion suffix is only the metric itself.
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


def criterion_prompt(task: TaskSpec, criterion: Criterion, parent: Criterion | None) -> str:
    """Hierarchy-aware metric (HD-Eval Appendix G.2): the parent aspect and the defined child."""
    aspect = f"Aspect: {parent.name}\n" if parent is not None else ""
    return f"{aspect}Metric: {criterion.name}: {criterion.definition}\nScore (1-5):"


def likelihood_instruction(
    task: TaskSpec, criterion: Criterion | None, parent: Criterion | None
) -> str:
    """GPTScore-style instruction; the text under evaluation is then scored as the reply."""
    base = f"## Instructions\nWrite a {task.output_noun} of the {task.source_noun} above"
    if criterion is None:
        return base + "."
    if parent is None:
        return f"{base} that is excellent in {criterion.name} ({criterion.definition})."
    return (
        f"{base} that is excellent in {parent.name}, in particular in {criterion.name} "
        f"({criterion.definition})."
    )


def prompt_for(tree: CriteriaTree, criterion: Criterion, task: TaskSpec) -> str:
    return criterion_prompt(task, criterion, tree.parent(criterion))


def likelihood_for(tree: CriteriaTree, criterion: Criterion, task: TaskSpec) -> str:
    return likelihood_instruction(task, criterion, tree.parent(criterion))
