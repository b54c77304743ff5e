"""Hierarchy-aware prompts (HD-Eval Appendix G.2): root aspect, parent, then the child."""

from __future__ import annotations

import pytest

from hdeval.params import TaskSpec
from hdeval.scoring.prompts import (
    criterion_prompt,
    likelihood_for,
    likelihood_instruction,
    prompt_for,
    prompt_segments,
)
from hdeval.tree.criteria import CriteriaTree, Criterion

TASK = TaskSpec()
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "the collective quality of all sentences", None, 1),
        Criterion("flow", "Logical flow", "ideas follow from one another", "coherence", 2),
        Criterion("trans", "Transitions", "sentences are linked by connectives", "flow", 3),
    ]
)


def test_layer_3_prompt_states_root_parent_and_child_with_definitions() -> None:
    suffix = prompt_for(TREE, TREE.get("trans"), TASK)
    assert suffix == (
        "Aspect: coherence: the collective quality of all sentences\n"
        "Part of coherence: Logical flow: ideas follow from one another\n"
        "To evaluate the Logical flow of the summary, score this metric:\n"
        "Metric: Transitions: sentences are linked by connectives\n"
        "Score (1-5):"
    )


def test_layer_1_and_2_prompts() -> None:
    assert prompt_for(TREE, TREE.get("coherence"), TASK) == (
        "Metric: coherence: the collective quality of all sentences\nScore (1-5):"
    )
    assert prompt_for(TREE, TREE.get("flow"), TASK).splitlines() == [
        "Aspect: coherence: the collective quality of all sentences",
        "To evaluate the coherence of the summary, score this metric:",
        "Metric: Logical flow: ideas follow from one another",
        "Score (1-5):",
    ]


def test_layer_3_likelihood_instruction_names_the_whole_lineage() -> None:
    assert likelihood_for(TREE, TREE.get("trans"), TASK) == (
        "## Instructions\nWrite a summary for the news article above that is excellent in "
        "coherence (the collective quality of all sentences), in particular in Logical flow "
        "(ideas follow from one another), and within that in Transitions (sentences are linked "
        "by connectives)."
    )
    assert likelihood_instruction(TASK) == (
        "## Instructions\nWrite a summary for the news article above."
    )


def test_a_broken_lineage_is_refused() -> None:
    with pytest.raises(ValueError, match="not a child"):
        criterion_prompt(TASK, [TREE.get("coherence"), TREE.get("trans")])
    with pytest.raises(ValueError):
        criterion_prompt(TASK, [])


def test_the_hierarchy_lives_in_the_suffix_so_the_prefix_is_shared() -> None:
    """Every criterion of a sample shares the source + text segments; only suffixes differ,
    and each starts with a non-space character (segment boundaries never split a token)."""
    segments = prompt_segments(TASK, "An article.", "A summary.")
    assert all(s.endswith("\n\n") for s in segments)
    assert "coherence" not in "".join(segments)
    for criterion in TREE:
        suffix = prompt_for(TREE, criterion, TASK)
        assert not suffix[0].isspace()
        assert likelihood_for(TREE, criterion, TASK).startswith("## Instructions")
