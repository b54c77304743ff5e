"""Prompt templates: hierarchy-aware criterion prompts and GPTScore-style likelihood instructions.

Prompts are laid out so the longest shared part comes first and is computed once: the source
document, then the text under evaluation, then the criterion. Every segment ends with a blank
line and every following part starts with a non-space character, so segment boundaries never
split a token. Changing any template text requires bumping :data:`TEMPLATE_VERSION`, which is
part of every cache key.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from hdeval.criteria import CriteriaTree, Criterion

TEMPLATE_VERSION = "hdeval-prompts-1"


class TaskSpec(BaseModel):
    """What is being evaluated, in words the judge reads."""

    model_config = ConfigDict(extra="forbid")

    description: str = (
        "text summarization. A summary is a shorter passage that covers the key details of the "
        "original article"
    )
    source_label: str = "News article"
    output_label: str = "Summary"
    output_noun: str = "summary"
    source_noun: str = "news article"


def source_segment(task: TaskSpec, source: str) -> str:
    return (
        f"You will be given a {task.source_noun} and a {task.output_noun} of it.\n\n"
        f"## {task.source_label}\n{source.strip()}\n\n"
    )


def output_segment(task: TaskSpec, output: str) -> str:
    return f"## {task.output_label}\n{output.strip()}\n\n"


def criterion_prompt(task: TaskSpec, criterion: Criterion, parent: Criterion | None) -> str:
    """Hierarchy-aware evaluation instruction (HD-Eval Appendix G.2): the parent and the child."""
    if parent is None:
        focus = f"the {criterion.name} of the {task.output_noun} above"
        metric = f"{criterion.name}: {criterion.definition}"
    else:
        focus = f"the {parent.name} of the {task.output_noun} above"
        metric = f"{criterion.name}: {criterion.definition}"
    return (
        f"## Instructions\nWe would like to evaluate {focus}. Specifically, score the "
        f"{task.output_noun} on the following metric.\n{metric}\n"
        "Score it on a scale of 1 to 5, with 1 being the lowest and 5 the highest. "
        "Reply with the score only, a single digit."
    )


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
