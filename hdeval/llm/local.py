"""Local transformers backend with shared-prefix KV caching and packed criterion suffixes.

A request is ``chat_head + segment_1 + ... + segment_n + suffix + chat_tail``. The KV cache of
every prefix level (``head + segment_1``, ``head + segment_1 + segment_2`` ...) is kept in a small
LRU, so the source document is encoded once for all texts of that document and the text once for
all its criteria. The suffixes of one call run packed into one sequence over the shared cache, and
the vocabulary projection is applied only to the positions whose logits are needed.

A likelihood request reads the text after an instruction (``segments + instruction + tail +
text``), so the text cannot be shared; the instruction can. The KV of each instruction over a
document is computed once and kept (:class:`_Context`), and every text of that document is read
over the document and the instruction it follows: per text only its own tokens are computed.

Segments are tokenised separately and concatenated, so a boundary must not split a token: every
prompt template ends its segments with a newline and starts the next with a non-space character.

The context length is the model's ``max_position_embeddings``, or ``max_context`` if smaller; the
scorer fits prompts to it (:mod:`hdeval.truncation`), and a longer prompt is refused with
:class:`~hdeval.truncation.ContextOverflow` before it reaches the model.

Only the tokenizer and the model's config are read when the backend is made; the weights load
on the first forward pass (:attr:`TransformersBackend.model`), so a judge whose every request
the result cache answers never loads them.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from hdeval.embedded import MANIFEST
from hdeval.errors import ConfigError
from hdeval.llm.digits import DEFAULT_MIN_MASS
from hdeval.llm.types import SCORE_DIGITS, DigitScore, LogLikelihood, TokenCounts
from hdeval.paths import sha256_file
from hdeval.truncation import ContextOverflow

log = logging.getLogger(__name__)

_PLACEHOLDER = "\u2063HDEVAL_MESSAGE\u2063"


def cpu_supports_bf16() -> bool:
    """True where bf16 matmuls beat the alternatives on this CPU: it has AMX tiles (``amx_bf16``)
    and torch's kernels may use AVX512.

    AVX512-BF16 alone is not enough: on a 2-core Xeon with AVX512-BF16 and AVX512-VNNI but no
    AMX, the 0.5B judge prefilled 190 tokens/s in bf16, 300 in fp32 and 806 with int8 Linear
    layers (``benchmarks/scoring.py``), so such a CPU runs fp32 with int8
    (:func:`resolve_quantize`). An AMD EPYC with AVX512-BF16 and AVX-VNNI but no AMX runs bf16
    faster than fp32 (640 against 256 tokens/s) but int8 faster still (964), so the rule holds
    there too.
    Also false where torch's kernels are held below AVX512 (``ATEN_CPU_CAPABILITY=avx2``), so
    that a CPU capped to AVX2 picks what an AVX2-only one does.
    """
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bf16_is_fast(flags.split(), torch.backends.cpu.get_cpu_capability())


def bf16_is_fast(cpu_flags: Sequence[str], capability: str) -> bool:
    """Whether ``dtype: auto`` picks bf16 on a CPU with these ``/proc/cpuinfo`` flags and torch
    CPU ``capability`` (see :func:`cpu_supports_bf16`)."""
    return capability == "AVX512" and "amx_bf16" in cpu_flags


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":
        if torch.cuda.is_available() or cpu_supports_bf16():
            return torch.bfloat16
        return torch.float32
    try:
        return {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[
            name
        ]
    except KeyError as exc:
        raise ConfigError(
            f"llm.dtype must be auto, bfloat16, float16 or float32, got {name!r}"
        ) from exc


def weights_fingerprint(path: Path) -> str:
    """sha256 identifying a model's weights: the source GGUF hash or the weight files' hashes."""
    if path.is_file():
        return sha256_file(path)
    manifest = path / MANIFEST
    if manifest.is_file():
        return json.loads(manifest.read_text())["source_sha256"]
    files = sorted(p for p in path.iterdir() if p.suffix in {".safetensors", ".bin", ".gguf"})
    if not files:
        raise ConfigError(f"no weight files (*.safetensors, *.bin, *.gguf) in {path}")
    sidecar = path / ".hdeval-fingerprint.json"
    stamp = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    if sidecar.is_file():
        cached = json.loads(sidecar.read_text())
        if cached.get("stamp") == stamp:
            return cached["sha256"]
    import hashlib

    digest = hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()
    with contextlib.suppress(OSError):
        sidecar.write_text(json.dumps({"stamp": stamp, "sha256": digest}))
    return digest


QUANTIZATIONS = ("none", "int8", "auto")


def resolve_quantize(name: str, dtype: str, device: str) -> str:
    """``auto`` is int8 where ``dtype: auto`` runs fp32 on the CPU (no AMX), else none."""
    if name != "auto":
        return name
    fp32_cpu = dtype == "auto" and device == "cpu" and resolve_dtype("auto") == torch.float32
    return "int8" if fp32_cpu else "none"


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every Linear layer (the vocabulary projection too) as a dynamic int8 one.

    Weights are int8 per output channel, activations quantised per call (torch's dynamic
    quantisation, fbgemm/x86 kernels); the rest of the model stays float32. The vocabulary
    projection is the largest Linear of a small model (136M of 494M weights for Qwen2.5-0.5B)
    and likelihood mode runs it on every token of the text. (torch marks its eager-mode
    quantisation API deprecated in favour of torchao, which is not a dependency; it works in the
    pinned torch.)
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    spec = {torch.nn.Linear: per_channel_dynamic_qconfig}
    return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)


@dataclass(eq=False)
class _Context:
    """A likelihood instruction (with the chat template's tail) read over one prefix: its keys
    and values per layer, and the final hidden state of its last token, which predicts the
    first token of every text read after it."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    last: torch.Tensor


class TransformersBackend:
    """A causal LM from a Hugging Face directory or a GGUF file, run with transformers."""

    def __init__(
        self,
        model_path: str | Path,
        dtype: str = "auto",
        device: str = "cpu",
        pack_tokens: int = 256,
        prefix_cache_size: int = 4,
        context_cache_size: int = 64,
        min_digit_mass: float = DEFAULT_MIN_MASS,
        threads: int | None = None,
        max_context: int | None = None,
        quantize: str = "none",
    ) -> None:
        from transformers import AutoConfig, AutoTokenizer

        path = Path(model_path).expanduser()
        if not path.exists():
            raise ConfigError(f"llm.model_path {path} does not exist")
        if threads:
            torch.set_num_threads(threads)
        if quantize not in QUANTIZATIONS:
            raise ConfigError(f"llm.quantize must be none, int8 or auto, got {quantize!r}")
        quantize = resolve_quantize(quantize, dtype, device)
        self.dtype = (
            torch.float32 if quantize == "int8" and dtype == "auto" else resolve_dtype(dtype)
        )
        self.device = torch.device(device)
        if quantize == "int8" and (self.dtype != torch.float32 or self.device.type != "cpu"):
            raise ConfigError("llm.quantize: int8 needs llm.dtype auto or float32 on the CPU")
        self._load_dir, self._gguf = (path.parent, path.name) if path.is_file() else (path, None)
        self.tokenizer = AutoTokenizer.from_pretrained(self._load_dir, gguf_file=self._gguf)
        self.config = AutoConfig.from_pretrained(self._load_dir, gguf_file=self._gguf)
        self._model: torch.nn.Module | None = None
        self.quantize = quantize
        self.pack_tokens = pack_tokens
        self.min_digit_mass = min_digit_mass
        model_context = getattr(self.config, "max_position_embeddings", None)
        self.max_context = min(filter(None, (max_context, model_context)), default=None)
        precision = str(self.dtype)[6:] + ("" if quantize == "none" else f"-{quantize}")
        self.identity = f"transformers:{path.name}:{weights_fingerprint(path)[:16]}:{precision}"
        self._head_ids, self._tail_ids = self._chat_frame()
        self._pad_id = self.tokenizer.pad_token_id or self.tokenizer.eos_token_id or 0
        self._digit_ids = self._single_token_ids(SCORE_DIGITS)
        self._prefix_cache: OrderedDict[tuple[int, ...], object] = OrderedDict()
        self._prefix_cache_size = prefix_cache_size
        self._context_cache: OrderedDict[tuple[tuple[int, ...], tuple[int, ...]], _Context] = (
            OrderedDict()
        )
        self._context_cache_size = context_cache_size
        self._head_fp32: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.tokens = TokenCounts()

    @property
    def model(self) -> torch.nn.Module:
        """The weights, loaded (and quantised) on first use: a stage whose every request is
        answered by the result cache never pays the 10-20 s this takes on two cores."""
        if self._model is None:
            self.load()
        return self._model

    def load(self) -> None:
        """Load the weights now (:attr:`model` does on first use)."""
        from transformers import AutoModelForCausalLM

        log.info("loading the judge %s", self.identity)
        model = AutoModelForCausalLM.from_pretrained(
            self._load_dir, gguf_file=self._gguf, dtype=self.dtype, attn_implementation="sdpa"
        )
        model.to(self.device).eval()
        self._model = quantize_int8(model) if self.quantize == "int8" else model

    @model.setter
    def model(self, model: torch.nn.Module) -> None:
        self._model = model

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory (see :attr:`model`)."""
        return self._model is not None

    # ----------------------------------------------------------------- prompt framing
    def _chat_frame(self) -> tuple[list[int], list[int]]:
        """Token ids before and after the user message in the model's chat template."""
        if self.tokenizer.chat_template is None:
            return [], []
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": _PLACEHOLDER}], tokenize=False, add_generation_prompt=True
        )
        head, tail = rendered.split(_PLACEHOLDER)
        return self._encode(head), self._encode(tail)

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
                "tokens; hdeval.truncation.fit_to_context cuts prompts to fit"
            )

    def render(self, segments: Sequence[str], suffix: str) -> str:
        """The whole prompt text as the model sees it (for tests and debugging)."""
        head = self.tokenizer.decode(self._head_ids)
        tail = self.tokenizer.decode(self._tail_ids)
        return head + "".join(segments) + suffix + tail

    # ----------------------------------------------------------------- KV cache of prefixes
    def _levels(self, segments: Sequence[str]) -> list[tuple[int, ...]]:
        """Token ids of ``head + segments[:1]``, ``head + segments[:2]`` ... (the cache keys)."""
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
            new_ids = levels[depth][done:]
            cache = self._extend(copy.deepcopy(cache) if cache is not None else None, new_ids, done)
            done = len(levels[depth])
            self._remember(levels[depth], cache)
        return cache, done

    def _extend(self, cache: object, new_ids: Sequence[int], past: int) -> object:
        from transformers import DynamicCache

        if cache is None:
            cache = DynamicCache(config=self.config)
        self._check_context(past + len(new_ids))
        if new_ids:
            input_ids = torch.tensor([list(new_ids)], device=self.device)
            self.model.get_decoder()(
                input_ids=input_ids,
                position_ids=torch.arange(past, past + len(new_ids), device=self.device)[None],
                past_key_values=cache,
                use_cache=True,
            )
            self.tokens.add(prompt=len(new_ids))
        return cache

    def _remember(self, key: tuple[int, ...], cache: object) -> None:
        self._prefix_cache[key] = cache
        self._prefix_cache.move_to_end(key)
        while len(self._prefix_cache) > self._prefix_cache_size:
            self._prefix_cache.popitem(last=False)

    # ----------------------------------------------------------------- packed suffix pass
    def _packs(self, lengths: Sequence[int]) -> list[list[int]]:
        """Consecutive row indices grouped into passes of at most ``pack_tokens`` tokens."""
        packs: list[list[int]] = []
        size = 0
        for i, n in enumerate(lengths):
            if not packs or size + n > self.pack_tokens:
                packs.append([])
                size = 0
            packs[-1].append(i)
            size += n
        return packs

    @torch.inference_mode()
    def _suffix_hidden(
        self,
        cache: object,
        past: int,
        rows: Sequence[Sequence[int]],
        positions: Sequence[Sequence[int]],
    ) -> list[torch.Tensor]:
        """Final hidden states at ``positions`` of each suffix row, rows packed over ``cache``."""
        self._check_context(past + max(len(r) for r in rows))
        hidden: list[torch.Tensor] = []
        for pack in self._packs([len(r) for r in rows]):
            states, _ = self._packed_pass(cache, past, [rows[i] for i in pack])
            start = 0
            for i in pack:
                hidden.append(states[[start + p for p in positions[i]]])
                start += len(rows[i])
        return hidden

    def _packed_pass(
        self, cache: object, past: int, rows: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, object]:
        """Final hidden states of ``rows``, concatenated, in one pass over one copy of ``cache``;
        and that copy, which now holds the rows' keys and values after ``past``.

        Each token attends to the whole prefix and to the earlier tokens of its own row (a
        block-causal mask), and position ids restart at ``past`` for every row, so each row sees
        exactly what it would see alone. A pack of n tokens runs at nearly the rate of a whole
        prompt; n padded batch rows, each with its own copy of the cache, ran ~3x slower. Packs
        stay small (``pack_tokens``) because the attention over the masked-out part of the
        block-causal square is computed and wasted.
        """
        _, offset, own_row = self._block_causal([len(r) for r in rows])
        prefix = torch.ones((len(offset), past), dtype=torch.bool, device=self.device)
        copied = copy.deepcopy(cache)
        hidden = self._forward(copied, rows, torch.cat([prefix, own_row], dim=1), past + offset)
        return hidden, copied

    def _block_causal(
        self, lengths: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For rows of ``lengths`` packed into one sequence: each token's row, its offset in the
        row, and the mask letting it see the earlier tokens of its own row only."""
        sizes = torch.tensor(lengths, device=self.device)
        row_of = torch.repeat_interleave(torch.arange(len(lengths), device=self.device), sizes)
        offset = torch.cat([torch.arange(int(n), device=self.device) for n in lengths])
        own_row = (row_of[:, None] == row_of[None, :]) & (offset[:, None] >= offset[None, :])
        return row_of, offset, own_row

    def _forward(
        self,
        cache: object,
        rows: Sequence[Sequence[int]],
        mask: torch.Tensor,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """Final hidden states of the packed ``rows`` over ``cache`` (extended in place)."""
        input_ids = torch.tensor([[t for r in rows for t in r]], device=self.device)
        hidden = self.model.get_decoder()(
            input_ids=input_ids,
            attention_mask=mask[None, None],
            position_ids=positions[None],
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state[0]
        self.tokens.add(prompt=input_ids.shape[1])
        return hidden

    # ----------------------------------------------------------------- likelihood contexts
    def _contexts(
        self, level: tuple[int, ...], cache: object, past: int, contexts: Sequence[tuple[int, ...]]
    ) -> dict[tuple[int, ...], _Context]:
        """Each of ``contexts`` read over the prefix ``level`` (KV ``cache`` of ``past`` tokens):
        kept ones from the context cache, the others computed in packed passes, where each
        context sees the prefix and itself only."""
        found: dict[tuple[int, ...], _Context] = {}
        for context in dict.fromkeys(contexts):
            kept = self._context_cache.get((level, context))
            if kept is not None:
                self._context_cache.move_to_end((level, context))
                self.tokens.add(reused=len(context))
                found[context] = kept
        missing = [c for c in dict.fromkeys(contexts) if c not in found]
        for pack in self._packs([len(c) for c in missing]):
            rows = [missing[i] for i in pack]
            states, extended = self._packed_pass(cache, past, rows)
            start = 0
            for row in rows:
                span = slice(past + start, past + start + len(row))
                kv = [
                    (layer.keys[:, :, span].clone(), layer.values[:, :, span].clone())
                    for layer in extended.layers
                ]
                found[row] = _Context(kv, states[start + len(row) - 1])
                start += len(row)
        for context in missing:
            self._context_cache[(level, context)] = found[context]
            while len(self._context_cache) > self._context_cache_size:
                self._context_cache.popitem(last=False)
        return found

    def _text_hidden(
        self,
        cache: object,
        past: int,
        contexts: Sequence[_Context],
        texts: Sequence[Sequence[int]],
    ) -> list[torch.Tensor]:
        """The hidden states that predict each of ``texts``, read after its context.

        Texts are packed as suffixes are; a pass's cache is the prefix followed by the keys and
        values of the contexts its texts follow, and each token sees the prefix, its own
        context and the earlier tokens of its text. A text's last token predicts nothing and is
        not run; its first token is predicted by the context's last hidden state.
        """
        rows = [list(text[:-1]) for text in texts]
        hidden: list[torch.Tensor] = []
        for pack in self._packs([len(r) for r in rows]):
            states = self._context_pass(
                cache, past, [contexts[i] for i in pack], [rows[i] for i in pack]
            )
            start = 0
            for i in pack:
                own = states[start : start + len(rows[i])]
                hidden.append(torch.cat([contexts[i].last[None], own]))
                start += len(rows[i])
        return hidden

    def _context_pass(
        self,
        cache: object,
        past: int,
        contexts: Sequence[_Context],
        rows: Sequence[Sequence[int]],
    ) -> torch.Tensor:
        """Final hidden states of ``rows``, concatenated, each row read after its context."""
        from transformers import DynamicCache

        if not any(rows):
            return contexts[0].last[None][:0]
        used = list({id(c): c for c in contexts}.values())
        which = torch.tensor([used.index(c) for c in contexts], device=self.device)
        sizes = torch.tensor([c.kv[0][0].shape[2] for c in used], device=self.device)
        packed = DynamicCache(config=self.config)
        for index, layer in enumerate(cache.layers):
            keys = torch.cat([layer.keys, *(c.kv[index][0] for c in used)], dim=2)
            values = torch.cat([layer.values, *(c.kv[index][1] for c in used)], dim=2)
            packed.update(keys, values, index)
        owner = torch.repeat_interleave(torch.arange(len(used), device=self.device), sizes)
        row_of, offset, own_row = self._block_causal([len(r) for r in rows])
        sees_context = which[row_of][:, None] == owner[None, :]
        prefix = torch.ones((len(offset), past), dtype=torch.bool, device=self.device)
        mask = torch.cat([prefix, sees_context, own_row], dim=1)
        return self._forward(packed, rows, mask, past + sizes[which][row_of] + offset)

    def _logprobs(self, hidden: torch.Tensor, exact: bool = False) -> torch.Tensor:
        """Log-probabilities over the vocabulary; ``exact`` projects in fp32.

        In bf16 the logits are rounded to ~3 significant digits, which moves an expected 1-5
        score by a few hundredths: digit scores (one position each) are projected exactly. A
        likelihood averages its tokens' rounding away, and there the projection of every
        position of the text in fp32 would cost more than the decoder.
        """
        if not exact or hidden.dtype == torch.float32:
            return torch.log_softmax(self.model.get_output_embeddings()(hidden).float(), dim=-1)
        if self._head_fp32 is None:
            head = self.model.get_output_embeddings()
            self._head_fp32 = (
                head.weight.float(),
                None if head.bias is None else head.bias.float(),
            )
        weight, bias = self._head_fp32
        logits = torch.nn.functional.linear(hidden.float(), weight, bias)
        return torch.log_softmax(logits, dim=-1)

    # ----------------------------------------------------------------- public interface
    @torch.inference_mode()
    def digit_scores(self, segments: Sequence[str], suffixes: Sequence[str]) -> list[DigitScore]:
        cache, past = self._prefix_state(segments)
        rows = [self._encode(suffix) + self._tail_ids for suffix in suffixes]
        hidden = torch.cat(self._suffix_hidden(cache, past, rows, [[len(r) - 1] for r in rows]))
        return [self._digit_score(lp) for lp in self._logprobs(hidden, exact=True)]

    def _digit_score(self, logprobs: torch.Tensor) -> DigitScore:
        probs = logprobs[self._digit_ids].exp().double()
        mass = float(probs.sum())
        if mass < self.min_digit_mass:
            top = torch.topk(logprobs, 5)
            shown = ", ".join(
                f"{self.tokenizer.decode([int(i)])!r}:{float(v.exp()):.2f}"
                for v, i in zip(top.values, top.indices, strict=True)
            )
            return DigitScore(
                mass=mass,
                failure=(
                    f"digit mass {mass:.3f} below {self.min_digit_mass}; top reply tokens: {shown}"
                ),
            )
        return DigitScore(probs=tuple(float(p) for p in probs / mass), mass=mass)

    @torch.inference_mode()
    def loglikelihoods(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[LogLikelihood]:
        return [
            LogLikelihood(sum=float(lp.double().sum()), n_tokens=len(lp))
            for lp in self.token_logprobs(segments, items)
        ]

    @torch.inference_mode()
    def token_logprobs(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[torch.Tensor]:
        """Log-probability of every token of each item's continuation, read after
        ``segments`` and the item's instruction (what :meth:`loglikelihoods` sums)."""
        levels = self._levels(segments)
        cache, past = self._prefix_state(segments, levels)
        contexts, targets = [], []
        for i, (instruction, continuation) in enumerate(items):
            context = tuple(self._encode(instruction) + self._tail_ids)
            answer = self._encode(continuation)
            if not answer:
                raise ValueError(f"empty continuation for item {i}")
            self._check_context(past + len(context) + len(answer))
            contexts.append(context)
            targets.append(answer)
        shared = self._contexts(levels[-1], cache, past, contexts)
        hidden = self._text_hidden(cache, past, [shared[c] for c in contexts], targets)
        return [
            self._logprobs(h)[torch.arange(len(answer)), torch.tensor(answer)]
            for h, answer in zip(hidden, targets, strict=True)
        ]

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        ids = self._head_ids + self._encode(prompt) + self._tail_ids
        self._check_context(len(ids) + 1)
        if self.max_context:
            max_new_tokens = min(max_new_tokens, self.max_context - len(ids))
        input_ids = torch.tensor([ids], device=self.device)
        output = self.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=self._pad_id,
        )
        self.tokens.add(prompt=len(ids), completion=output.shape[1] - len(ids))
        return self.tokenizer.decode(output[0, len(ids) :], skip_special_tokens=True).strip()

    # ----------------------------------------------------------------- reference path for tests
    def _hidden(self, ids: Sequence[int]) -> torch.Tensor:
        """Final hidden states of one whole prompt run without any cache."""
        input_ids = torch.tensor([list(ids)], device=self.device)
        return self.model.get_decoder()(input_ids=input_ids).last_hidden_state[0]

    @torch.inference_mode()
    def digit_scores_full(
        self, segments: Sequence[str], suffixes: Sequence[str]
    ) -> list[DigitScore]:
        """Like :meth:`digit_scores`, but each prompt tokenised whole and run without a cache."""
        results = []
        for suffix in suffixes:
            ids = self._encode(self.render(segments, suffix))
            hidden = self._hidden(ids)[-1:]
            results.append(self._digit_score(self._logprobs(hidden, exact=True)[0]))
        return results

    @torch.inference_mode()
    def loglikelihoods_full(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[LogLikelihood]:
        """Reference log-likelihoods: each prompt run whole, without any cache."""
        results = []
        for instruction, continuation in items:
            context = self._encode(self.render(segments, instruction))
            answer = self._encode(continuation)
            rows = torch.arange(len(context) - 1, len(context) + len(answer) - 1)
            logprobs = self._logprobs(self._hidden(context + answer)[rows])
            token_lp = logprobs[torch.arange(len(answer)), torch.tensor(answer)]
            results.append(LogLikelihood(sum=float(token_lp.double().sum()), n_tokens=len(answer)))
        return results


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))
