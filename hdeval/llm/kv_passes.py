"""The local judge's forward passes over shared prefixes: the KV cache of every prefix level,
kept likelihood instructions, and one forward pass per item.

A prefix level (``chat head + segment_1``, ``+ segment_2`` ...) is computed once, in a pass of
its own over the level before, and kept in a small LRU; a likelihood instruction read over a
prefix is kept too (:class:`KeptInstruction`). Every item (a criterion suffix, an instruction,
a text) then runs in a forward pass of its own over them (:meth:`SharedPrefixPasses._pass`), so
that its answer never depends on what else is asked with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(eq=False)
class KeptInstruction:
    """A likelihood instruction (with the chat template's tail) read over one prefix: its keys
    and values per layer, and the final hidden state of its last token, which predicts the
    first token of every text read after it."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    last: torch.Tensor


class SharedPrefixPasses:
    """The pass machinery :class:`~hdeval.llm.local.TransformersBackend` runs its requests on.

    It uses the backend's ``model``, ``config``, ``tokens``, ``_head_ids``, ``_encode`` and
    ``_check_context``, and keeps ``_prefix_cache`` and ``_context_cache`` (LRUs of at most
    ``_prefix_cache_size`` and ``_context_cache_size`` entries).
    """

    # ----------------------------------------------------------------- KV cache of prefixes
    def _levels(self, segments: Sequence[str]) -> list[tuple[int, ...]]:
        """Token ids of ``head + segments[:1]``, ``head + segments[:2]`` ... (the cache keys;
        each level is computed in a pass of its own over the one before)."""
        levels: list[tuple[int, ...]] = []
        ids = list(self._head_ids)
        for segment in segments:
            ids = ids + self._encode(segment)
            levels.append(tuple(ids))
        if not levels:
            raise ValueError("at least one prompt segment is required")
        return levels

    def forget(self) -> None:
        """Drop every kept KV cache (prefixes and likelihood contexts), as a new process has."""
        self._prefix_cache.clear()
        self._context_cache.clear()

    @torch.inference_mode()
    def _prefix_state(
        self, segments: Sequence[str], levels: list[tuple[int, ...]] | None = None
    ) -> tuple[object, int]:
        """KV cache and length of ``head + segments``, reusing the longest cached level."""
        levels = levels or self._levels(segments)
        start, cache = 0, None
        for depth in range(len(levels) - 1, -1, -1):
            if levels[depth] in self._prefix_cache:
                self._prefix_cache.move_to_end(levels[depth])
                cache, start = self._prefix_cache[levels[depth]], depth + 1
                self.tokens.add(reused=len(levels[depth]))
                break
        done = len(levels[start - 1]) if start else 0
        for depth in range(start, len(levels)):
            _, cache = self._pass(cache, done, levels[depth][done:])
            done = len(levels[depth])
            self._remember(levels[depth], cache)
        return cache, done

    def _remember(self, key: tuple[int, ...], cache: object) -> None:
        self._prefix_cache[key] = cache
        self._prefix_cache.move_to_end(key)
        while len(self._prefix_cache) > self._prefix_cache_size:
            self._prefix_cache.popitem(last=False)

    # ----------------------------------------------------------------- one item, one pass
    def _view(self, kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> object:
        """A new cache holding ``kv`` (keys, values per layer); a pass over it appends to the
        new cache only (``DynamicCache`` grows by concatenation), so ``kv`` stays as it is."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        for index, (keys, values) in enumerate(kv):
            cache.update(keys, values, index)
        return cache

    def _pass(self, cache: object, past: int, ids: Sequence[int]) -> tuple[torch.Tensor, object]:
        """Final hidden states of ``ids`` read after ``cache`` (``past`` tokens, None for none),
        in one forward pass of their own, and the cache extended by them (``cache`` is kept).

        Every item (a criterion suffix, a likelihood instruction, a text) gets a pass of its
        own, never shared with another item: with int8 Linear layers the activations are
        quantised with one scale per pass, and in bf16 the kernels' rounding follows the shape
        of the pass, so an item packed with others would get other numbers than alone (up to
        0.2 nats per token in int8). One pass per item gives an item the same answer whatever
        else is asked, in what order, and in which process (the result cache depends on it).
        """
        self._check_context(past + len(ids))
        extended = self._view(self._kv(cache)) if cache is not None else self._view([])
        input_ids = torch.tensor([list(ids)], device=self.device)
        hidden = self.model.get_decoder()(
            input_ids=input_ids, cache=extended, use_cache=True
        ).last_hidden_state[0]
        self.tokens.add(prompt=len(ids))
        return hidden, extended

    @staticmethod
    def _kv(cache: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in cache.layers]

    # ----------------------------------------------------------------- likelihood contexts
    def _context(self, level: tuple[int, ...], cache: object, past: int, ids: tuple[int, ...]):
        """The likelihood instruction ``ids`` read over the prefix ``level`` (KV ``cache`` of
        ``past`` tokens): kept, or computed in a pass of its own and kept."""
        kept = self._context_cache.get((level, ids))
        if kept is not None:
            self._context_cache.move_to_end((level, ids))
            self.tokens.add(reused=len(ids))
            return kept
        hidden, extended = self._pass(cache, past, ids)
        span = slice(past, past + len(ids))
        kv = [(k[:, :, span].clone(), v[:, :, span].clone()) for k, v in self._kv(extended)]
        context = KeptInstruction(kv, hidden[-1])
        self._context_cache[(level, ids)] = context
        while len(self._context_cache) > self._context_cache_size:
            self._context_cache.popitem(last=False)
        return context

    def _text_hidden(
        self, cache: object, past: int, context: KeptInstruction, text: Sequence[int]
    ) -> torch.Tensor:
        """The hidden states that predict each token of ``text`` read after the prefix and
        ``context``: the context's last state predicts the first token; the text's last token
        predicts nothing and is not run."""
        if len(text) == 1:
            return context.last[None]
        kv = [
            (torch.cat([k, ck], dim=2), torch.cat([v, cv], dim=2))
            for (k, v), (ck, cv) in zip(self._kv(cache), context.kv, strict=True)
        ]
        own, _ = self._pass(self._view(kv), past + context.kv[0][0].shape[2], text[:-1])
        return torch.cat([context.last[None], own])
