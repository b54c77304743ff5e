"""Local transformers backend with shared-prefix KV caching and batched item passes.

A request is ``chat_head + segment_1 + ... + segment_n + suffix + chat_tail``. The KV cache of
every prefix level is kept in an LRU that holds all a text's passes read (up to eight: source,
source and text, source-free prompt, a signal family's segments), so the source is encoded once
for all texts of a document and the text once for all its criteria. The suffixes run as the
rows of batched passes over the shared cache (:mod:`hdeval.llm.local.kv_passes`: no row sees
another, so an item's answer does not depend on what else is asked); only the needed positions
get the vocabulary projection.
A likelihood request reads the text after an instruction; the KV of each instruction over a
document is computed once and kept, so per text only its own tokens are computed, and
:meth:`TransformersBackend.token_logprobs` returns every token's log-probability.

Segments are tokenised separately and concatenated (:mod:`hdeval.llm.local.framing`), so a
boundary must not split a token: every prompt template ends its segments with a newline and starts
the next with a non-space character.
The context length is ``max_position_embeddings``, or ``max_context`` if smaller; the scorer
fits prompts to it (:mod:`hdeval.llm.truncation`) and a longer prompt is refused before it reaches
the model. The weights load on the first forward pass, so a judge whose every request the result
cache answers never loads them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from hdeval.errors import ConfigError
from hdeval.llm.digits import DEFAULT_MIN_MASS, digit_score
from hdeval.llm.local.framing import PromptFraming
from hdeval.llm.local.int8 import quantize_int8
from hdeval.llm.local.kv_passes import KeptInstruction, Row, SharedPrefixPasses
from hdeval.llm.local.precision import (
    QUANTIZATIONS,
    resolve_dtype,
    resolve_quantize,
    weights_fingerprint,
)
from hdeval.llm.local.row_attention import ROW_ATTENTION
from hdeval.llm.local.weights_file import WeightsFile
from hdeval.llm.types import SCORE_DIGITS, DigitScore, LogLikelihood, PrefixWork, TokenCounts
from hdeval.llm.validity import checked_likelihood

log = logging.getLogger(__name__)
#: Stored weight types a float32 judge with int8 layers loads as they are: they widen exactly.
_WIDEN_EXACTLY = (torch.bfloat16, torch.float16)
PROJECTED_ROWS = 32  #: positions of a text projected onto the vocabulary at a time


class TransformersBackend(PromptFraming, SharedPrefixPasses):
    """A causal LM from a Hugging Face directory or a GGUF file, run with transformers."""

    def __init__(
        self,
        model_path: str | Path,
        dtype: str = "auto",
        device: str = "cpu",
        prefix_cache_size: int = 12,
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
            raise ConfigError(
                f"llm.quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}"
            )
        quantize = resolve_quantize(quantize, dtype, device)
        self.dtype = (
            torch.float32 if quantize != "none" and dtype == "auto" else resolve_dtype(dtype)
        )
        self.device = torch.device(device)
        if quantize != "none" and (self.dtype != torch.float32 or self.device.type != "cpu"):
            raise ConfigError(f"llm.quantize: {quantize} needs llm.dtype auto or float32 on a CPU")
        self._load_dir, self._gguf = (path.parent, path.name) if path.is_file() else (path, None)
        self.tokenizer = AutoTokenizer.from_pretrained(self._load_dir, gguf_file=self._gguf)
        self.config = AutoConfig.from_pretrained(self._load_dir, gguf_file=self._gguf)
        self._model: torch.nn.Module | None = None
        self.quantize = quantize
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
        self._context_cache: OrderedDict[tuple, KeptInstruction] = OrderedDict()
        self._context_cache_size = context_cache_size
        self._head_fp32: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.tokens = TokenCounts()
        self.prefix_work = PrefixWork()

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
        stored = getattr(self.config, "dtype", None)
        narrow = self.quantize != "none" and self._gguf is None and stored in _WIDEN_EXACTLY
        with _quiet_loading():  # no weight-loading bar in every stage that loads the judge
            model = AutoModelForCausalLM.from_pretrained(
                self._load_dir,
                gguf_file=self._gguf,
                dtype=stored if narrow else self.dtype,  # int8: widened as it is quantised
                attn_implementation=ROW_ATTENTION,
            )
        model.to(self.device).eval()
        if self.quantize != "none":
            weights = WeightsFile.of(self._load_dir) if narrow else None
            model = quantize_int8(model, self.quantize, weights)
        self._model = model

    @model.setter
    def model(self, model: torch.nn.Module) -> None:
        self._model = model

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory (see :attr:`model`)."""
        return self._model is not None

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
        levels = self._levels(segments)
        cache, _ = self._prefix_state(segments, levels)
        prefix = self._kv(cache)
        split = [self._stem_split(suffix) for suffix in suffixes]
        contexts = self._contexts(levels[-1], prefix, [stem for stem, _ in split if stem])
        rows = [
            Row((prefix, contexts[stem].kv) if stem else (prefix,), rest) for stem, rest in split
        ]
        if not rows:
            return []
        last = torch.stack([result.hidden[-1] for result in self._rows(rows)])
        return [self._digit_score(logprobs) for logprobs in self._logprobs(last, exact=True)]

    def _digit_score(self, logprobs: torch.Tensor) -> DigitScore:
        """The digit distribution of one reply position, read as a server's top log-probs are
        (:func:`~hdeval.llm.digits.digit_score`): the score digits and the 20 most likely
        tokens, variants of a digit (" 3") pooled with it."""
        ids = dict.fromkeys([*self._digit_ids, *torch.topk(logprobs, 20).indices.tolist()])
        tokens: dict[str, float] = {}
        for token_id in ids:  # distinct ids may decode to the same text
            text, value = self.tokenizer.decode([token_id]), float(logprobs[token_id])
            tokens[text] = float(np.logaddexp(tokens[text], value)) if text in tokens else value
        return digit_score(tokens, self.min_digit_mass)

    @torch.inference_mode()
    def loglikelihoods(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[LogLikelihood]:
        found = self.token_logprobs(segments, items)
        sent = [len(self._encode(continuation)) for _, continuation in items]
        return [
            checked_likelihood(lp.double().tolist(), n) for lp, n in zip(found, sent, strict=True)
        ]

    @torch.inference_mode()
    def token_logprobs(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[torch.Tensor]:
        """Log-probability of every token of each item's continuation, read after
        ``segments`` and the item's instruction (what :meth:`loglikelihoods` sums)."""
        levels = self._levels(segments)
        cache, past = self._prefix_state(segments, levels)
        prefix = self._kv(cache)
        instructions = [tuple(self._encode(text) + self._tail_ids) for text, _ in items]
        answers = [self._encode(continuation) for _, continuation in items]
        for i, (ids, answer) in enumerate(zip(instructions, answers, strict=True)):
            if not answer:
                raise ValueError(f"empty continuation for item {i}")
            self._check_context(past + len(ids) + len(answer))
        contexts = self._contexts(levels[-1], prefix, instructions)
        reads = [(contexts[ids], answer) for ids, answer in zip(instructions, answers, strict=True)]
        found = zip(self._texts_hidden(prefix, reads), answers, strict=True)
        return [self._answer_logprobs(hidden, answer) for hidden, answer in found]

    def _answer_logprobs(self, hidden: torch.Tensor, answer: list[int]) -> torch.Tensor:
        """log p of each position's answer token. int8 projects :data:`PROJECTED_ROWS` positions
        at a time (its rows are each their own; whole, a text's logits and softmax take 120 MB
        per 100 tokens of the 0.5B judge); a float projection, whose last bits move with its
        row count, projects the text whole."""
        step = PROJECTED_ROWS if self.quantize != "none" else len(answer)
        parts = zip(hidden.split(step), torch.tensor(answer)[:, None].split(step), strict=True)
        return torch.cat([self._logprobs(h).gather(1, t)[:, 0] for h, t in parts])

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
            results.append(checked_likelihood(token_lp.double().tolist(), len(answer)))
        return results


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """transformers' progress bars off while the weights load; as they were afterwards."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))
