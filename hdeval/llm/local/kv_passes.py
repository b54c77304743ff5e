"""The local judge's forward passes over shared prefixes: the KV cache of every prefix level,
kept likelihood instructions, and batched passes in which every item is a row of its own.

A prefix level (``chat head + segment_1``, ``+ segment_2`` ...) is computed once, in a pass of
its own over the level before, and kept in a small LRU; a likelihood instruction read over a
prefix is kept too (:class:`KeptInstruction`). The items over them (criterion suffixes,
instructions, texts) run as the rows of batched passes (:meth:`SharedPrefixPasses._rows`):
the model's weights are read once per pass instead of once per item, and no row sees another,
so an item's answer does not depend on what else is asked with it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hdeval.llm.local.row_attention import RowSpans

#: Keys and values per layer, each ``(1, heads, tokens, head_dim)``.
KV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Row:
    """One item of a batched pass: token ``ids`` read after the KV ``past`` (parts, in order:
    a prefix, then e.g. a kept instruction)."""

    past: tuple[KV, ...]
    ids: Sequence[int]


@dataclass(frozen=True)
class RowResult:
    """A row's final hidden states, and its own keys and values where they were kept."""

    hidden: torch.Tensor
    kv: KV


@dataclass(eq=False)
class KeptInstruction:
    """A likelihood instruction (with the chat template's tail) read over one prefix: its keys
    and values per layer, and the final hidden state of its last token, which predicts the
    first token of every text read after it."""

    kv: KV
    last: torch.Tensor


class SharedPrefixPasses:
    """The pass machinery :class:`~hdeval.llm.local.backend.TransformersBackend` runs its
    requests on.

    It uses the backend's ``model``, ``config``, ``tokens``, ``_head_ids``, ``_pad_id``,
    ``_encode`` and ``_check_context``, keeps ``_prefix_cache`` and ``_context_cache`` (LRUs
    of at most ``_prefix_cache_size`` and ``_context_cache_size`` entries), and adds its
    prefix levels' passes to ``prefix_work``.
    """

    #: Most padded tokens (rows x longest row) of one batched pass: bounds its activations.
    _batch_tokens = 2048

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

    # ----------------------------------------------------------------- passes
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
        and the cache extended by them (``cache`` is kept): a prefix level's own pass."""
        self._check_context(past + len(ids))
        model = self.model  # loading the weights is not the pass's time
        start = time.perf_counter()
        extended = self._view(self._kv(cache)) if cache is not None else self._view([])
        input_ids = torch.tensor([list(ids)], device=self.device)
        hidden = model.get_decoder()(
            input_ids=input_ids, cache=extended, use_cache=True
        ).last_hidden_state[0]
        self.tokens.add(prompt=len(ids))
        self.prefix_work.tokens += len(ids)
        self.prefix_work.seconds += time.perf_counter() - start
        return hidden, extended

    def _rows(self, rows: Sequence[Row], keep: bool = False) -> list[RowResult]:
        """Final hidden states of every row's ``ids`` read after its ``past`` (and, with
        ``keep``, the keys and values of those ids), in batched passes of at most
        ``_batch_tokens`` padded tokens; rows of similar length share a pass.

        A row is never mixed with another: each has its own past and positions, attention runs
        for each row on its own unpadded keys (:mod:`hdeval.llm.local.row_attention`), the int8
        Linear layers quantise every token on its own (per-token scales, integer products) and
        norms work per token. So an item gets the same answer alone, packed with others or in
        another order: bit for bit in int8; in fp32 the Linear kernels round a taller batch a
        little otherwise (1e-4 in a final hidden state, 1e-6 nats per token); bf16 on AMX picks
        its kernels' blocking by the batch's size (about 2e-3 nats per token, docs/design.md).
        """
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].ids))
        results: list[RowResult | None] = [None] * len(rows)
        batch: list[int] = []
        for index in order:
            if batch and (len(batch) + 1) * len(rows[index].ids) > self._batch_tokens:
                self._run_rows([rows[i] for i in batch], keep, batch, results)
                batch = []
            batch.append(index)
        if batch:
            self._run_rows([rows[i] for i in batch], keep, batch, results)
        return results  # type: ignore[return-value]

    def _run_rows(
        self, rows: list[Row], keep: bool, where: list[int], results: list[RowResult | None]
    ) -> None:
        """One batched pass: row j's past at cache slots ``[0, past_j)``, padding up to the
        longest past ``P``, its ids at ``[P, P + n_j)``; results into ``results[where[j]]``."""
        from transformers import DynamicCache

        pasts = [sum(part[0][0].shape[2] for part in row.past) for row in rows]
        lengths = [len(row.ids) for row in rows]
        for past, length in zip(pasts, lengths, strict=True):
            self._check_context(past + length)
        width, longest, batch = max(pasts), max(lengths), len(rows)
        cache = DynamicCache(config=self.config)
        if width:
            template = next(row.past[0] for row in rows if row.past)
            for layer, (keys, _) in enumerate(template):
                shape = (batch, keys.shape[1], width, keys.shape[3])
                batched = [keys.new_zeros(shape), keys.new_zeros(shape)]
                for j, row in enumerate(rows):
                    start = 0
                    for part in row.past:
                        size = part[layer][0].shape[2]
                        for slot in range(2):
                            batched[slot][j, :, start : start + size] = part[layer][slot][0]
                        start += size
                cache.update(batched[0], batched[1], layer)
        input_ids = torch.full((batch, longest), self._pad_id, dtype=torch.long)
        for j, row in enumerate(rows):
            input_ids[j, : len(row.ids)] = torch.tensor(list(row.ids))
        positions = torch.tensor(pasts)[:, None] + torch.arange(longest)[None, :]
        spans = RowSpans(tuple(pasts), tuple(lengths), width)
        hidden = self.model.get_decoder()(
            input_ids=input_ids.to(self.device),
            attention_mask={kind: spans for kind in _mask_kinds(self.config)},
            position_ids=positions.to(self.device),
            cache=cache,
            use_cache=keep,
        ).last_hidden_state
        layers = self._kv(cache) if keep else []
        for j, length in enumerate(lengths):
            kv = [
                (k[j : j + 1, :, width : width + length].clone(),
                 v[j : j + 1, :, width : width + length].clone())
                for k, v in layers
            ]  # fmt: skip
            results[where[j]] = RowResult(hidden[j, :length], kv)
            self.tokens.add(prompt=length)

    @staticmethod
    def _kv(cache: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in cache.layers]

    # ----------------------------------------------------------------- likelihood contexts
    def _contexts(
        self, level: tuple[int, ...], prefix: KV, wanted: Sequence[tuple[int, ...]]
    ) -> dict[tuple[int, ...], KeptInstruction]:
        """The likelihood instructions ``wanted`` (token ids) read over the prefix ``level``
        (keys and values ``prefix``): kept ones reused, the others computed in batched passes
        and kept."""
        contexts: dict[tuple[int, ...], KeptInstruction] = {}
        for ids in wanted:
            key = (level, ids)
            if ids in contexts or key in self._context_cache:
                self.tokens.add(reused=len(ids))
            if ids not in contexts and key in self._context_cache:
                self._context_cache.move_to_end(key)
                contexts[ids] = self._context_cache[key]
        missing = [ids for ids in dict.fromkeys(wanted) if ids not in contexts]
        computed = self._rows([Row((prefix,), ids) for ids in missing], keep=True)
        for ids, result in zip(missing, computed, strict=True):
            contexts[ids] = KeptInstruction(result.kv, result.hidden[-1])
            self._context_cache[(level, ids)] = contexts[ids]
        while len(self._context_cache) > self._context_cache_size:
            self._context_cache.popitem(last=False)
        return contexts

    def _texts_hidden(
        self, prefix: KV, reads: Sequence[tuple[KeptInstruction, Sequence[int]]]
    ) -> list[torch.Tensor]:
        """For each (instruction, text) read after the prefix: the hidden states that predict
        each token of the text. The instruction's last state predicts the first token; the
        text's last token predicts nothing and is not run."""
        runs = [i for i, (_, text) in enumerate(reads) if len(text) > 1]
        rows = [Row((prefix, reads[i][0].kv), reads[i][1][:-1]) for i in runs]
        own = dict(zip(runs, self._rows(rows), strict=True))
        return [
            torch.cat([context.last[None], own[i].hidden]) if i in own else context.last[None]
            for i, (context, _) in enumerate(reads)
        ]


def _mask_kinds(config: object) -> set[str]:
    """The attention kinds of the model's layers, each of which takes the batch's mask."""
    return set(getattr(config, "layer_types", None) or ["full_attention"])
