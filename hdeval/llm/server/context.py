"""A server judge's context, in its own tokens: what :mod:`hdeval.llm.truncation` needs to cut
a prompt to fit it, as the embedded judge's prompts are cut.

Tokens are counted by the server's tokenizer where it lends it: vLLM's ``/tokenize`` and
``/detokenize``, llama-cpp-python's ``/extras/tokenize`` and ``/extras/detokenize``. Elsewhere
(hosted APIs) a text is counted in UTF-8 bytes, which a byte-level tokenizer never has fewer of
than tokens: a prompt cut to fit in bytes fits in tokens, with more cut than needed.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from hdeval.errors import JudgeUnavailableError

log = logging.getLogger(__name__)

#: Tokens counted for the chat template around a message where it cannot be learned.
FRAME_MARGIN = 64
#: A tokenizer's own additions (BOS, EOS) beyond one token per byte.
SPECIAL_MARGIN = 2
_REPLACEMENT = "\ufffd"
#: (tokenize path, its text field, detokenize path, its text field) per server.
_TOKENIZERS = (
    ("/tokenize", "prompt", "/detokenize", "prompt"),  # vLLM
    ("/extras/tokenize", "input", "/extras/detokenize", "text"),  # llama-cpp-python
)

#: Most memory the remembered tokenizations of one judge take, in bytes.
MEMO_BYTES = 16 * 2**20

Post = Callable[[str, dict[str, Any]], Any]


def _memo_size(text: str, ids: list[int]) -> int:
    return len(text.encode("utf-8", errors="replace")) + 8 * len(ids)


class ServerTokens:
    """Tokenize, detokenize and count text as the server at hand does (see the module)."""

    def __init__(self, post: Post, model: str, server: str) -> None:
        self._post = post
        self._model = model
        self._server = server
        self._endpoints: tuple[str, str, str, str] | None = None
        self._probed = False
        self._known: OrderedDict[str, list[int]] = OrderedDict()
        self.memo_bytes = 0
        self._lock = threading.Lock()

    @property
    def by_bytes(self) -> bool:
        """Whether the server lends no tokenizer, so that UTF-8 bytes stand for tokens."""
        self._probe()
        return self._endpoints is None

    def _probe(self) -> None:
        with self._lock:
            if self._probed:
                return
            for endpoints in _TOKENIZERS:
                try:
                    if self._tokens(endpoints, "probe", special=False):
                        self._endpoints = endpoints
                        break
                except JudgeUnavailableError:
                    raise
                except Exception as exc:
                    log.debug("%s%s: %s", self._server, endpoints[0], type(exc).__name__)
            if self._endpoints is None:
                log.warning(
                    "the judge at %s lends no tokenizer (/tokenize): prompts are fitted to its "
                    "context counting UTF-8 bytes, never fewer than its tokens, so more of a "
                    "long text is cut than needed",
                    self._server,
                )
            self._probed = True

    def _tokens(self, endpoints: tuple[str, str, str, str], text: str, special: bool) -> list[int]:
        path, field, _, _ = endpoints
        body = {"model": self._model, field: text}
        if path == "/tokenize":
            body["add_special_tokens"] = special
        tokens = self._post(path, body)["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ValueError(f"{path} answered no list of token ids")
        return tokens

    def tokenize(self, text: str) -> list[int]:
        """``text``'s token ids without special tokens (bytes where the server lends no
        tokenizer); remembered (up to :data:`MEMO_BYTES`), since the same criterion suffixes are
        asked for every text."""
        if self.by_bytes:
            return list(text.encode("utf-8"))
        with self._lock:
            known = self._known.get(text)
            if known is not None:
                self._known.move_to_end(text)
        if known is None:
            known = self._tokens(self._endpoints, text, special=False)  # type: ignore[arg-type]
            self._keep(text, known)
        return known

    def _keep(self, text: str, ids: list[int]) -> None:
        """Remember ``text``'s ids, the least recently asked forgotten first so that the memo
        holds at most :data:`MEMO_BYTES` (a text's UTF-8 bytes and 8 bytes per id)."""
        size = _memo_size(text, ids)
        if size > MEMO_BYTES:
            return
        with self._lock:
            if text in self._known:
                return
            self._known[text] = ids
            self.memo_bytes += size
            while self.memo_bytes > MEMO_BYTES:
                old, old_ids = self._known.popitem(last=False)
                self.memo_bytes -= _memo_size(old, old_ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; a character cut in two at the end is dropped."""
        if self.by_bytes:
            return bytes(ids).decode("utf-8", errors="ignore")
        _, _, path, field = self._endpoints  # type: ignore[misc]
        ids = list(ids)
        for _ in range(4):  # a cut inside a character: some servers refuse it, others mark it
            try:
                text = self._post(path, {"model": self._model, "tokens": ids})[field]
                return text.rstrip(_REPLACEMENT)
            except JudgeUnavailableError:
                raise
            except Exception:
                if not ids:
                    raise
                ids = ids[:-1]
        raise ValueError(f"{self._server}{path} cannot detokenize the cut text")

    def count(self, text: str, enough: int) -> int:
        """Tokens of ``text`` as a whole prompt, special tokens included; where its UTF-8 bytes
        show it has at most ``enough`` tokens, or the server lends no tokenizer, that bound."""
        bound = len(text.encode("utf-8")) + SPECIAL_MARGIN
        if bound <= enough or self.by_bytes:
            return bound
        return len(self._tokens(self._endpoints, text, special=True))  # type: ignore[arg-type]


class ServerContext:
    """The context part of :class:`~hdeval.llm.server.backend.OpenAICompatibleBackend`: what
    :class:`~hdeval.llm.types.ContextLimited` asks of a judge.

    It uses the backend's ``reported`` fields, ``_ready``, ``_tokens``, ``_probe_lock``,
    ``_chat_frame`` and ``_frame_problem``.
    """

    _given_context: int | None
    _frame_asked: bool

    @property
    def max_context(self) -> int | None:
        """Tokens a prompt may hold: the server's context (``llm.max_context`` where given,
        else vLLM's ``max_model_len``) less the one token of the reply; None where neither is
        known."""
        self._ready()
        served = self._given_context or self.reported.get("max_model_len")
        return served - 1 if isinstance(served, int) and served > 1 else None

    def tokenize(self, text: str) -> list[int]:
        return self._tokens.tokenize(text)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._tokens.detokenize(ids)

    def prompt_tokens(self, segments: Sequence[str], suffix: str, continuation: str = "") -> int:
        """Tokens of a request as the server reads it: the chat template around the message
        (counted as :data:`FRAME_MARGIN` where it cannot be learned), and a continuation after
        it."""
        with self._probe_lock:
            if not self._frame_asked:
                self._frame_problem()
                self._frame_asked = True
        head, tail = self._chat_frame or ("", "")
        margin = 0 if self._chat_frame is not None else FRAME_MARGIN
        text = head + "".join(segments) + suffix + tail + continuation
        return self._tokens.count(text, (self.max_context or 0) - margin) + margin
