"""int8 Linear layers for the local judge on CPUs without AMX (``llm.quantize: int8`` and
``int8_fbgemm``).

Weights are int8 with one scale per output channel; activations are quantised on the fly with
one scale per token (row), and the product is computed in int32 by ``torch._int_mm`` on plain
``torch.int8`` tensors. A token's numbers therefore depend on that token only, never on the
other tokens of its pass, and they stay close to float32: on the embedded 0.5B judge a text's
mean token log-probability moved by 0.02 nats from float32, against 0.1-0.26 with torch's
dynamic quantisation (one activation scale per pass), whose quantised-tensor API torch has also
deprecated. Everything but the Linear layers (norms, attention, rotary embeddings) stays float32.

Below VNNI ``torch._int_mm`` falls back to a slow loop, and fbgemm's int8 kernels, written for
AVX2, are the fast ones (:class:`FbgemmInt8Linear`, ``llm.quantize: int8_fbgemm``). They take
their activations through torch's dynamic-quantisation op, which picks one scale per pass; each
token is therefore scaled to its own -127..127 first, and one fixed row holding exactly -127 and
127 is appended, so that the pass's scale is the same whatever else is in it and a token's
numbers again depend on that token only. Activations keep 8 bits and weights get 7 per output
channel: fbgemm's AVX2 kernels sum pairs of products in 16 bits, and an 8-bit activation (0..255
with its zero point) times a weight of at most 63 cannot saturate them. On the 0.5B judge this
moved a likelihood feature 0.013-0.020 nats from float32 (mean over 6 texts); 7-bit activations
(fbgemm's ``reduce_range``) moved it 0.03.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator

import torch

from hdeval.llm.local.weights_file import BLOCK_ROWS, WeightsFile

#: Largest int8 magnitude used (symmetric quantisation, so -127..127).
_LEVELS = 127.0
#: Largest weight magnitude of :class:`FbgemmInt8Linear`: 7 bits, so that no 16-bit sum of two
#: products of an 8-bit activation (0..255 with its zero point) and a weight can saturate.
_WEIGHT_LEVELS = 63.0

#: The last activations quantised in this thread: the query, key and value projections read
#: the same input, and so do the MLP's gate and up projections.
_last = threading.local()


def _reused(x: torch.Tensor, kind: str, compute: Callable) -> tuple[torch.Tensor, torch.Tensor]:
    """``compute`` of ``x``'s rows (its last dimension, as float32), reused when the same tensor
    is quantised again the same ``kind`` of way (unchanged: an inference tensor has no version
    counter, and a decoder layer's projections read their input as it is)."""
    version = None if x.is_inference() else x._version
    kept = getattr(_last, "entry", None)
    if kept is not None and kept[0] is x and kept[1] == version and kept[2] == kind:
        return kept[3]
    value = compute(x.reshape(-1, x.shape[-1]).float())
    _last.entry = (x, version, kind, value)
    return value


def _steps(rows: torch.Tensor) -> torch.Tensor:
    """Each row's step: its largest magnitude over :data:`_LEVELS`."""
    return rows.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(_LEVELS)


def _codes(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    step = _steps(rows)
    return torch.div(rows, step).round_().to(torch.int8), step


def _scaled(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    step = _steps(rows)
    fixed = rows.new_zeros(1, rows.shape[1])
    fixed[0, 0], fixed[0, -1] = _LEVELS, -_LEVELS
    return torch.cat([torch.div(rows, step).clamp_(-_LEVELS, _LEVELS), fixed]), step


def quantise_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 codes and per-row steps of ``x`` (rows: its last dimension), reused for the next
    layer reading the same input."""
    return _reused(x, "codes", _codes)


def scale_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of ``x`` each scaled to -127..127, with the fixed row (-127 and 127) appended,
    and the per-row steps: :class:`FbgemmInt8Linear`'s input, reused like
    :func:`quantise_rows`'s."""
    return _reused(x, "scaled", _scaled)


def _weight_blocks(
    linear: torch.nn.Linear, blocks: Iterable[torch.Tensor] | None
) -> Iterator[tuple[slice, torch.Tensor]]:
    """``linear``'s weight as float32 blocks of rows, each with the rows it holds: ``blocks``
    (its rows, read elsewhere in order) where given, else its own weight's. A layer is
    quantised block by block into codes allocated once, so that only one block is ever widened
    to float32 (per output channel, so the codes are those of the whole weight at once)."""
    start = 0
    for block in linear.weight.detach().split(BLOCK_ROWS) if blocks is None else blocks:
        yield slice(start, start + len(block)), block.float()
        start += len(block)


class Int8Linear(torch.nn.Module):
    """A :class:`torch.nn.Linear` with int8 weights per output channel and int8 activations per
    token, multiplied in int32."""

    def __init__(
        self, linear: torch.nn.Linear, blocks: Iterable[torch.Tensor] | None = None
    ) -> None:
        super().__init__()
        weight_t = torch.empty(linear.in_features, linear.out_features, dtype=torch.int8)
        scale = torch.empty(linear.out_features)
        for rows, weight in _weight_blocks(linear, blocks):
            scale[rows] = weight.abs().amax(dim=1).clamp(min=1e-12) / _LEVELS
            weight_t[:, rows] = (weight / scale[rows, None]).round().to(torch.int8).t()
        self.register_buffer("weight_t", weight_t)  # (in, out), as _int_mm takes it
        self.register_buffer("scale", scale)
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().float())
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes, step = quantise_rows(x)
        out = torch._int_mm(codes, self.weight_t).to(torch.float32)
        out.mul_(step).mul_(self.scale)
        if self.bias is not None:
            out.add_(self.bias)
        return out.reshape(*x.shape[:-1], self.out_features)


class FbgemmInt8Linear(torch.nn.Module):
    """A :class:`torch.nn.Linear` with int8 weights per output channel, multiplied by fbgemm's
    kernels with int8 activations per token and 7-bit weights (see the module)."""

    def __init__(
        self, linear: torch.nn.Linear, blocks: Iterable[torch.Tensor] | None = None
    ) -> None:
        super().__init__()
        codes = torch.empty(linear.out_features, linear.in_features, dtype=torch.int8)
        scale = torch.empty(linear.out_features, dtype=torch.double)
        zero = torch.zeros(linear.out_features, dtype=torch.long)
        with warnings.catch_warnings():  # the quantised-tensor API is deprecated, not gone
            warnings.simplefilter("ignore")
            for rows, weight in _weight_blocks(linear, blocks):
                scale[rows] = (weight.abs().amax(dim=1).clamp(min=1e-12) / _WEIGHT_LEVELS).double()
                block = torch.quantize_per_channel(weight, scale[rows], zero[rows], 0, torch.qint8)
                codes[rows] = block.int_repr()
            quantised = torch._make_per_channel_quantized_tensor(codes, scale, zero, 0)
            del codes  # copied: one int8 copy of the weight fewer while it is packed
            self.packed = torch.ops.quantized.linear_prepack(quantised, None)
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().float())
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled, step = scale_rows(x)
        out = torch.ops.quantized.linear_dynamic(scaled, self.packed, False)[:-1]
        out.mul_(step)
        if self.bias is not None:
            out.add_(self.bias)
        return out.reshape(*x.shape[:-1], self.out_features)


#: The int8 Linear layer of each ``llm.quantize`` value that has one.
INT8_LAYERS: dict[str, type[torch.nn.Module]] = {
    "int8": Int8Linear,
    "int8_fbgemm": FbgemmInt8Linear,
}


class WideningEmbedding(torch.nn.Module):
    """An embedding table kept in the 16-bit type it was stored in, whose looked-up rows are
    float32: a float32 table's numbers (16-bit floats widen exactly) at a quarter of its
    memory. The table is the loaded weight as it is, in the weights file's memory map where
    transformers mapped it, so only the rows looked up are ever read into memory (a few MB,
    against 272 MB for the 0.5B judge's whole table). It is a plain attribute, so
    ``Module.float()`` keeps it."""

    def __init__(self, embedding: torch.nn.Embedding) -> None:
        super().__init__()
        self.table = embedding.weight.detach()
        self.padding_idx = embedding.padding_idx
        self.num_embeddings, self.embedding_dim = self.table.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(ids, self.table).float()


def quantize_int8(
    model: torch.nn.Module, kind: str = "int8", weights: WeightsFile | None = None
) -> torch.nn.Module:
    """``model`` with every Linear layer, the vocabulary projection included, replaced by the
    int8 layer of ``kind`` (:data:`INT8_LAYERS`; in place), and everything else in float32.
    The vocabulary projection is the largest Linear of a small model (136M of 494M weights for
    Qwen2.5-0.5B) and likelihood mode runs it on every token of the text.

    A model loaded in its stored 16-bit type gives the numbers of one loaded in float32 (each
    weight widens exactly before it is quantised, the norms widen, the input embedding widens
    the rows it looks up: :class:`WideningEmbedding`) without a float32 copy of every weight
    in memory. With ``weights``, its checkpoint, every weight the file holds as the model does
    is read from there a block of rows at a time, so that the pages of the mapped file are
    never read (see :mod:`~hdeval.llm.local.weights_file`)."""
    layer = INT8_LAYERS[kind]

    def blocks(name: str, like: torch.Tensor) -> Iterable[torch.Tensor] | None:
        return weights.row_blocks(name) if weights and weights.holds(name, like) else None

    for path, module in list(model.named_modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                weight = f"{path}.{name}.weight".lstrip(".")
                setattr(module, name, layer(child, blocks(weight, child.weight)))
    embedding = model.get_input_embeddings()
    if embedding.weight.dtype in (torch.bfloat16, torch.float16):
        model.set_input_embeddings(WideningEmbedding(embedding))
    model = model.float()
    _return_freed_heap()
    return model


def _return_freed_heap() -> None:
    """Hand the heap pages freed while quantising back to the system. glibc keeps most of the
    widened float32 blocks' pages after they are freed (about 150 MB for the 0.5B judge), and
    its ``malloc_trim`` returns them; a C library without it (musl, macOS) is left as it is."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
