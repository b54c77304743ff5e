"""How the local judge lays a request out in tokens: the chat template's frame around the user
message, every part tokenised on its own, a criterion suffix split into the stem sibling
criteria share and the rest, and the check that a prompt fits the context."""

from __future__ import annotations

from collections.abc import Sequence

from hdeval.errors import ConfigError
from hdeval.llm.chat_template import end_of_reply, frame
from hdeval.llm.truncation import ContextOverflow


class PromptFraming:
    """The tokenisation :class:`~hdeval.llm.local.backend.TransformersBackend` lays its requests
    out with. It uses the backend's ``tokenizer``, ``max_context`` and the chat frame's token
    ids, ``_head_ids`` and ``_tail_ids`` (from :meth:`_chat_frame`)."""

    # ----------------------------------------------------------------- prompt framing
    def _chat_frame(self) -> tuple[list[int], list[int]]:
        """Token ids before and after the user message in the model's chat template."""
        head, tail = frame(self.tokenizer)
        return self._encode(head), self._encode(tail)

    def end_of_reply(self) -> str:
        """What the chat template puts right after a reply (``<|im_end|>``); "" without one."""
        return end_of_reply(self.tokenizer)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _single_token_ids(self, digits: Sequence[str]) -> list[int]:
        ids = []
        for digit in digits:
            encoded = self._encode(digit)
            if len(encoded) != 1:
                raise ConfigError(f"the tokenizer splits score digit {digit!r}; use another model")
            ids.append(encoded[0])
        return ids

    def tokenize(self, text: str) -> list[int]:
        return self._encode(text)

    def frame_tokens(self) -> tuple[int, int]:
        """Tokens the chat template puts before the first segment and after the suffix."""
        return len(self._head_ids), len(self._tail_ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def prompt_tokens(self, segments: Sequence[str], suffix: str, continuation: str = "") -> int:
        """Length of a request as this backend lays it out (every part tokenised on its own)."""
        parts = [*segments, suffix, continuation]
        return len(self._head_ids) + len(self._tail_ids) + sum(len(self._encode(p)) for p in parts)

    def _check_context(self, n_tokens: int) -> None:
        if self.max_context and n_tokens > self.max_context:
            raise ContextOverflow(
                f"a prompt of {n_tokens} tokens exceeds the judge's context of {self.max_context} "
                "tokens; hdeval.llm.truncation.fit_to_context cuts prompts to fit"
            )

    def render(self, segments: Sequence[str], suffix: str) -> str:
        """The whole prompt text as the model sees it (for tests and debugging)."""
        head = self.tokenizer.decode(self._head_ids)
        tail = self.tokenizer.decode(self._tail_ids)
        return head + "".join(segments) + suffix + tail

    def _stem_split(self, suffix: str) -> tuple[tuple[int, ...], list[int]]:
        """Token ids of ``suffix``'s stem and of the rest with the chat tail.

        The stem is every line but the last two (in a hierarchy-aware prompt: the parent
        criteria, which sibling criteria share; the metric and the answer cue stay). It is read
        over the prefix once and kept, as a likelihood instruction is. It depends on the suffix
        alone, so an item's answer does not depend on what else is asked. No stem where there
        are at most two lines, or where the two parts would tokenise otherwise than the whole.
        """
        whole = self._encode(suffix)
        lines = suffix.split("\n")
        if len(lines) > 2:
            stem = "\n".join(lines[:-2]) + "\n"
            stem_ids, rest_ids = self._encode(stem), self._encode(suffix[len(stem) :])
            if stem_ids and stem_ids + rest_ids == whole:
                return tuple(stem_ids), rest_ids + self._tail_ids
        return (), whole + self._tail_ids
