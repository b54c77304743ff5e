"""The decomposition prompt (HD-Eval Appendix G.1): the wordings that ask an LLM to split one
criterion into at most k finer ones, given as "name: definition" lines.

The paper's wording comes first; two rewordings are tried when it yields nothing new (see
:func:`hdeval.tree.decompose.decompose_node`). :data:`TEMPLATE_VERSION` joins the prompt in the
cache
key of every decomposition reply.
"""

from __future__ import annotations

import re

from hdeval.errors import ConfigError
from hdeval.tree.criteria import Criterion

TEMPLATE_VERSION = "g1-decompose-v3"

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


def copies_answer_format(name: str, definition: str) -> bool:
    """Whether a parsed (name, definition) pair copies the answer format instead of naming a
    criterion ("<short name>: <one-sentence definition>", "criterion 2: ...")."""
    return bool(_PLACEHOLDER.search(name) or _PLACEHOLDER_DEFINITION.match(definition))


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
