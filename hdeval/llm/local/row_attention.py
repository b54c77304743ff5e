"""Attention for the local judge's batched passes, computed for every row on its own.

A batched pass (:meth:`~hdeval.llm.local.kv_passes.SharedPrefixPasses._rows`) pads its rows to one
shape, and a fused attention kernel blocks its work by that shape: on the 0.5B judge a row
padded by two tokens moved by about 3e-8 in the first layer, and int8 Linear layers, which
round every activation to one of 255 levels, carried such a change up to 2e-3 nats per token.
Here each row's attention runs on exactly the keys and queries it would have alone (its past and
its own tokens, no padding), so a row's numbers do not depend on the batch. Passes without
:class:`RowSpans` (a prefix level's own pass) run torch's SDPA as the ``sdpa`` implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

#: The ``attn_implementation`` name the local judge loads its model with.
ROW_ATTENTION = "hdeval_rows"


@dataclass(frozen=True)
class RowSpans:
    """Where each row's tokens lie in a batched pass: past ``pasts[j]`` at cache slots
    ``[0, pasts[j])``, its ``lengths[j]`` own tokens at ``[width, width + lengths[j])``."""

    pasts: tuple[int, ...]
    lengths: tuple[int, ...]
    width: int


def row_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: object,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention of a batched pass, one row at a time, each with its own causal mask; padded
    query positions get zeros. Any other mask goes to ``sdpa``."""
    if not isinstance(attention_mask, RowSpans):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    spans = attention_mask
    batch, heads, longest, dim = query.shape
    out = query.new_zeros(batch, longest, heads, dim)
    for j, (past, length) in enumerate(zip(spans.pasts, spans.lengths, strict=True)):
        own = slice(spans.width, spans.width + length)
        if past == spans.width:
            keys, values = key[j : j + 1, :, : past + length], value[j : j + 1, :, : past + length]
        else:
            keys = torch.cat([key[j : j + 1, :, :past], key[j : j + 1, :, own]], dim=2)
            values = torch.cat([value[j : j + 1, :, :past], value[j : j + 1, :, own]], dim=2)
        causal = torch.ones(length, past + length, dtype=torch.bool, device=query.device)
        row = torch.nn.functional.scaled_dot_product_attention(
            query[j : j + 1, :, :length],
            keys,
            values,
            attn_mask=causal.tril(diagonal=past),
            scale=kwargs.get("scaling"),
            enable_gqa=True,  # keys and values shared by query heads are not copied per head
        )
        out[j, :length] = row[0].transpose(0, 1)
    return out, None


AttentionInterface.register(ROW_ATTENTION, row_attention)
AttentionMaskInterface.register(ROW_ATTENTION, sdpa_mask)
