"""The local transformers backend on the real embedded model."""

from __future__ import annotations

import pytest

from hdeval.params import TaskSpec
from hdeval.scoring.prompts import (
    criterion_prompt,
    likelihood_instruction,
    prompt_segments,
    source_segment,
)
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.batching import batch_tolerance
from tests.dvc_project import first_source_words

pytestmark = pytest.mark.model

TASK = TaskSpec()
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "the collective quality of all sentences", None, 1),
        Criterion(
            "coherence.order", "sentence order", "sentences follow a logical order", "coherence", 2
        ),
        Criterion("fluency", "fluency", "the quality of individual sentences", None, 1),
    ]
)


@pytest.fixture(scope="module")
def summeval_rows(summeval_rows: list[dict]) -> list[dict]:
    """The session's SummEval rows, each article cut to its first 120 words: what these tests
    check needs a shared source, not a long one (an article is most of a prompt's tokens)."""
    return [first_source_words(r, 120) for r in summeval_rows]


def _suffixes() -> list[str]:
    return [criterion_prompt(TASK, TREE.lineage(c)) for c in TREE]


def test_digit_scores_are_distributions(embedded_backend, summeval_rows):
    row = summeval_rows[0]
    segments = prompt_segments(TASK, row["source"], row["output"])
    scores = embedded_backend.digit_scores(segments, _suffixes())
    assert len(scores) == 3
    for score in scores:
        assert score.ok, score.failure
        assert sum(score.probs) == pytest.approx(1.0, abs=1e-9)
        assert 1.0 <= score.expected <= 5.0
        assert score.mass > 0.5


def _cached_vs_full(backend, rows) -> list[float]:
    """|expected score| differences, document KV reused across the rows vs a cold run each."""
    diffs = []
    for row in rows:
        segments = prompt_segments(TASK, row["source"], row["output"])
        cached = backend.digit_scores(segments, _suffixes())
        full = backend.digit_scores_full(segments, _suffixes())
        diffs += [abs(a.expected - b.expected) for a, b in zip(cached, full, strict=True)]
    return diffs


def test_an_items_answer_does_not_depend_on_what_else_is_asked(
    auto_precision_backend, summeval_rows, monkeypatch
):
    """The same text's likelihood scored alone, in one batched pass with the other summaries of
    its document, in reverse order, split over passes, and after other instructions (rows of
    other lengths of past); the same criterion's digit score alone or with others: equal to
    1e-6 nats per token in the precision ``auto`` picks, or in bf16 on AMX within
    :data:`~tests.batching.BF16_TOLERANCE` (its kernels round a row by its batch's size)."""
    backend = auto_precision_backend
    source = [source_segment(TASK, summeval_rows[0]["source"])]
    instruction = likelihood_instruction(TASK)
    other = likelihood_instruction(TASK, TREE.lineage(TREE.get("coherence.order")))
    texts = [row["output"].strip() for row in summeval_rows[:4]]

    def means(items):
        return [r.mean for r in backend.loglikelihoods(source, items)]

    backend.forget()
    together = means([(instruction, t) for t in texts])
    backend.forget()
    reverse = means([(instruction, t) for t in reversed(texts)])[::-1]
    backend.forget()
    mixed = means([(other, texts[1]), (instruction, texts[0]), (other, texts[2])])
    alone = []
    for text in texts:
        backend.forget()
        alone += means([(instruction, text)])
    with monkeypatch.context() as patch:
        patch.setattr(backend, "_batch_tokens", 1)  # every row a pass of its own
        backend.forget()
        split = means([(instruction, t) for t in texts])
    warm = means([(likelihood_instruction(TASK, TREE.lineage(TREE.get("fluency"))), texts[0])])
    warm_again = means([(instruction, texts[0])])
    tol = batch_tolerance(backend.identity)
    for a, b, c, d in zip(alone, together, reverse, split, strict=True):
        assert abs(a - b) <= tol and abs(a - c) <= tol and abs(a - d) <= tol
    assert abs(mixed[1] - alone[0]) <= tol
    assert abs(warm_again[0] - alone[0]) <= tol and warm[0] != alone[0]
    backend.forget()
    assert abs(means([(other, texts[1])])[0] - mixed[0]) <= tol
    segments = prompt_segments(TASK, summeval_rows[0]["source"], summeval_rows[0]["output"])
    backend.forget()
    all_digits = [d.probs for d in backend.digit_scores(segments, _suffixes())]
    for suffix, probs in zip(_suffixes(), all_digits, strict=True):
        backend.forget()
        assert backend.digit_scores(segments, [suffix])[0].probs == pytest.approx(probs, abs=tol)


def test_a_criterion_suffix_shares_its_parents_lines_and_tokenises_as_a_whole(embedded_backend):
    """A child criterion's suffix is split after its parents' lines (the stem its siblings
    share, computed once per prefix); the two parts tokenise exactly as the whole suffix, so
    the judge reads the same tokens. A root criterion has no stem."""
    backend = embedded_backend
    child = criterion_prompt(TASK, TREE.lineage(TREE.get("coherence.order")))
    stem, rest = backend._stem_split(child)
    assert backend.detokenize(stem).startswith("Aspect: coherence")
    assert backend.detokenize(rest[: -len(backend._tail_ids)]).startswith("Metric: sentence order")
    assert [*stem, *rest] == backend.tokenize(child) + backend._tail_ids
    root = criterion_prompt(TASK, TREE.lineage(TREE.get("fluency")))
    assert backend._stem_split(root) == ((), backend.tokenize(root) + backend._tail_ids)


def test_packed_prefix_cache_matches_full_recompute(fp32_backend, summeval_rows):
    """Two texts of one document: the document's KV is reused, the result matches a cold run."""
    diffs = _cached_vs_full(fp32_backend, summeval_rows[:2])
    assert max(diffs) <= 0.02
    assert fp32_backend.tokens.reused > 0


def test_prefix_cache_in_bf16_stays_within_rounding_noise(embedded_dir, summeval_rows):
    """bf16 rounds every activation, so a packed pass and a whole-prompt pass differ a little
    (each is also ~0.02 from fp32): on average they must still agree within 0.02. Two texts on
    their source's first 40 words: a CPU without bf16 kernels emulates every bf16 product, many
    times slower than fp32."""
    from hdeval.llm.local.backend import TransformersBackend

    rows = [first_source_words(r, 40) for r in summeval_rows[:2]]
    diffs = _cached_vs_full(TransformersBackend(embedded_dir, dtype="bfloat16"), rows)
    assert sum(diffs) / len(diffs) <= 0.02
    assert max(diffs) <= 0.05


def test_likelihood_prefix_reuse_matches_full_recompute(embedded_backend, summeval_rows):
    source = [source_segment(TASK, summeval_rows[0]["source"])]
    for row in summeval_rows[:2]:
        items = [(likelihood_instruction(TASK, TREE.lineage(c)), row["output"]) for c in TREE]
        items.append((likelihood_instruction(TASK), row["output"]))
        cached = embedded_backend.loglikelihoods(source, items)
        full = embedded_backend.loglikelihoods_full(source, items)
        for a, b in zip(cached, full, strict=True):
            assert a.n_tokens == b.n_tokens > 5
            assert abs(a.mean - b.mean) <= 0.01
            assert a.mean < 0


def test_likelihood_reads_each_text_after_instructions_computed_once(fp32_backend, summeval_rows):
    """The instructions over a document are computed once; every later text of the document
    costs only its own tokens, and every token's log-probability, 1-token texts included,
    matches a cold whole-prompt run."""
    backend = fp32_backend
    backend.forget()
    source = [source_segment(TASK, summeval_rows[0]["source"])]
    instructions = [likelihood_instruction(TASK, TREE.lineage(c)) for c in TREE]
    instructions.append(likelihood_instruction(TASK))
    first, second = summeval_rows[0]["output"], summeval_rows[1]["output"]
    backend.loglikelihoods(source, [(i, first) for i in instructions])
    before = backend.tokens.prompt
    items = [(i, second) for i in instructions] + [(instructions[0], "Yes")]
    results = backend.loglikelihoods(source, items)
    own = sum(len(backend.tokenize(c)) - 1 for _, c in items)
    assert backend.tokens.prompt - before == own
    full = backend.loglikelihoods_full(source, items)
    assert full[-1].n_tokens == 1
    for a, c in zip(results, full, strict=True):
        assert a.n_tokens == c.n_tokens
        assert a.tokens == pytest.approx(c.tokens, abs=1e-4)  # every token, not only the sum


def test_likelihood_separates_real_from_shuffled_summary(embedded_backend, summeval_rows):
    import random

    row = summeval_rows[0]
    words = row["output"].split()
    random.Random(0).shuffle(words)
    source = [source_segment(TASK, row["source"])]
    instruction = likelihood_instruction(TASK)
    good, shuffled = embedded_backend.loglikelihoods(
        source, [(instruction, row["output"]), (instruction, " ".join(words))]
    )
    assert good.mean > shuffled.mean + 0.5


def test_non_digit_reply_is_a_failure_not_a_score(embedded_backend, summeval_rows):
    """A request whose natural reply is a word: recorded as a failure naming the reply tokens."""
    row = summeval_rows[0]
    segments = [
        source_segment(TASK, row["source"]),
        "## Task\nName the country the article is about, in one word.\n\n",
    ]
    [score] = embedded_backend.digit_scores(segments, ["Country:"])
    assert not score.ok
    assert score.expected is None
    assert "digit mass" in score.failure and "top reply tokens" in score.failure


def test_generate_returns_text_and_counts_its_tokens(embedded_backend):
    before = embedded_backend.tokens.to_dict()
    reply = embedded_backend.generate("Name one quality of a good summary. Answer in one line.", 24)
    assert isinstance(reply, str) and len(reply.strip()) > 0
    after = embedded_backend.tokens.to_dict()
    assert after["prompt"] - before["prompt"] >= 10
    assert 1 <= after["completion"] - before["completion"] <= 24


def test_weights_load_only_when_a_request_misses_the_cache(embedded_dir, summeval_rows, tmp_path):
    """A judge answers from the result cache without loading its weights (a stage re-run on
    scored texts pays no model load); its identity, tokenizer and context need none either."""
    from hdeval.llm.cache import ResultCache
    from hdeval.llm.judge import DIGITS, CachedJudge
    from hdeval.llm.local.backend import TransformersBackend

    row = summeval_rows[0]
    segments = prompt_segments(TASK, row["source"], row["output"])
    cache = ResultCache(tmp_path / "cache.sqlite")
    first = CachedJudge(TransformersBackend(embedded_dir, dtype="float32"), cache)
    suffixes = {first.key(DIGITS, "test", segments, s): s for s in _suffixes()}
    assert first.identity.endswith(":float32") and first.backend.max_context >= 4096
    assert first.backend.prompt_tokens(segments, _suffixes()[0]) > 100
    assert not first.backend.loaded
    computed = first.digit_scores(segments, suffixes)
    assert computed.computed == 3 and first.backend.loaded

    again = CachedJudge(TransformersBackend(embedded_dir, dtype="float32"), cache)
    answered = again.digit_scores(segments, suffixes)
    assert answered.cached == 3 and answered.computed == 0
    assert not again.backend.loaded
    assert answered.results == computed.results


def test_int8_judge_loads_scores_close_to_fp32_and_has_its_own_identity(
    fp32_backend, embedded_dir, summeval_rows
):
    """``llm.quantize: int8`` on one text: loads, scores, stays near fp32 and has an identity of
    its own, so its answers never share cache entries with fp32 ones. Its int8 Linear layers
    quantise activations per token (plain int8 tensors, no deprecated quantised-tensor API);
    benchmarks/quantization.py measured mean token log-likelihoods 0.01-0.02 nats from fp32."""
    import torch

    from hdeval.llm.local.backend import TransformersBackend
    from hdeval.llm.local.int8 import Int8Linear

    int8 = TransformersBackend(embedded_dir, quantize="int8")
    assert int8.quantize == "int8" and int8.dtype == fp32_backend.dtype
    assert int8.identity == fp32_backend.identity.replace(":float32", ":float32-int8")
    assert any(isinstance(m, Int8Linear) for m in int8.model.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in int8.model.modules())
    row = first_source_words(summeval_rows[0], 40)  # int8 is slow without VNNI
    segments = prompt_segments(TASK, row["source"], row["output"])
    ours = int8.digit_scores(segments, _suffixes())
    theirs = fp32_backend.digit_scores(segments, _suffixes())
    diffs = [abs(a.expected - b.expected) for a, b in zip(ours, theirs, strict=True)]
    items = [(likelihood_instruction(TASK), row["output"].strip())]
    source = [source_segment(TASK, row["source"])]
    lik_diff = abs(
        int8.loglikelihoods(source, items)[0].mean
        - fp32_backend.loglikelihoods(source, items)[0].mean
    )
    print(f"int8 vs fp32: expected-score diffs {diffs}, likelihood mean diff {lik_diff:.4f}")
    assert max(diffs) <= 0.3
    assert 0 < lik_diff <= 0.08
    assert int8.generate("Name one colour.", max_new_tokens=4)  # the decomposer's path


def test_fbgemm_int8_judge_stays_near_fp32_and_each_row_owns_its_numbers(
    fp32_backend, embedded_dir, summeval_rows, monkeypatch
):
    """``llm.quantize: int8_fbgemm`` (fbgemm's kernels, the fast int8 path without VNNI): every
    Linear layer is int8, the identity is its own, scores stay
    near fp32 (benchmarks/quantization.py: 0.013-0.020 nats per likelihood feature), and a
    text's likelihood alone equals its likelihood in a batch of others to 1e-6: the per-token
    scaling and the fixed row make one pass's quantisation that of any other, and so does a
    text's vocabulary projection split into blocks of positions. Loaded from
    the stored bf16 weights, it computes what the same layers loaded in float32 compute."""
    import copy

    import torch

    from hdeval.llm.local.backend import TransformersBackend
    from hdeval.llm.local.int8 import FbgemmInt8Linear, WideningEmbedding, quantize_int8

    fb = TransformersBackend(embedded_dir, quantize="int8_fbgemm")
    assert fb.quantize == "int8_fbgemm" and fb.dtype == torch.float32
    assert fb.identity == fp32_backend.identity.replace(":float32", ":float32-int8_fbgemm")
    assert not any(isinstance(m, torch.nn.Linear) for m in fb.model.modules())
    assert isinstance(fb.model.get_output_embeddings(), FbgemmInt8Linear)
    row = first_source_words(summeval_rows[0], 60)
    segments = prompt_segments(TASK, row["source"], row["output"])
    ours = fb.digit_scores(segments, _suffixes())
    theirs = fp32_backend.digit_scores(segments, _suffixes())
    diffs = [abs(a.expected - b.expected) for a, b in zip(ours, theirs, strict=True)]
    source = [source_segment(TASK, row["source"])]
    texts = [r["output"].strip() for r in summeval_rows[:3]]
    items = [(likelihood_instruction(TASK), t) for t in texts]
    together = [r.mean for r in fb.loglikelihoods(source, items)]
    fb.forget()
    alone = fb.loglikelihoods(source, items[1:2])[0].mean
    reference = fp32_backend.loglikelihoods(source, items[1:2])[0].mean
    print(f"int8_fbgemm vs fp32: score diffs {diffs}, likelihood diff {alone - reference:.4f}")
    assert abs(alone - together[1]) <= 1e-6
    assert max(diffs) <= 0.3
    assert 0 < abs(alone - reference) <= 0.08
    # the vocabulary projected PROJECTED_ROWS positions at a time: the whole projection's numbers
    split = fb.token_logprobs(source, items[:1])[0]
    monkeypatch.setattr("hdeval.llm.local.backend.PROJECTED_ROWS", len(split))
    fb.forget()
    assert len(split) > 32 and torch.equal(split, fb.token_logprobs(source, items[:1])[0])
    # loaded in its stored bf16 and widened as it is quantised: a float32 load's numbers
    assert isinstance(fb.model.get_input_embeddings(), WideningEmbedding)
    widened = quantize_int8(copy.deepcopy(fp32_backend.model), "int8_fbgemm")
    assert not isinstance(widened.get_input_embeddings(), WideningEmbedding)
    ids = torch.tensor([fb.tokenizer.encode(texts[0])])
    with torch.inference_mode():
        assert torch.equal(fb.model(ids).logits, widened(ids).logits)


def test_kernels_capped_to_avx2_pick_the_avx2_only_precision():
    """``dtype: auto`` / ``quantize: auto`` under ``ATEN_CPU_CAPABILITY=avx2`` choose fp32, as on
    a CPU without bf16, even where the CPU has AVX512-BF16 or AMX; int8 Linear layers where the
    CPU has VNNI (its int8 products are the fast ones), unless oneDNN is held to AVX2 as well,
    as ``benchmarks/default_run.py --isa avx2`` does: then fbgemm's int8 layers, an AVX2-only
    CPU's choice (fbgemm picks its kernels by the CPU itself, so there they may use more)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from hdeval.llm.local.precision import int8_is_fast

    code = (
        "from hdeval.llm.local.precision import resolve_dtype, resolve_quantize; "
        "print(resolve_dtype('auto'), resolve_quantize('auto', 'auto', 'cpu'))"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    vnni = int8_is_fast(Path("/proc/cpuinfo").read_text().split())
    assert out.stdout.split() == ["torch.float32", "int8" if vnni else "int8_fbgemm"]
    env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["torch.float32", "int8_fbgemm"]


def test_auto_precision_is_bf16_only_with_amx_tiles():
    """AVX512-BF16 without AMX ran bf16 slower than fp32 (and 4x slower than int8): such a CPU
    gets fp32 with int8 Linear layers; one with AMX keeps bf16, unless oneDNN is held below
    AMX; one with AVX2 but no VNNI gets fbgemm's int8 layers; the live CPU follows the rule."""
    import os
    from pathlib import Path

    import torch

    from hdeval.llm.local.precision import (
        bf16_is_fast,
        fbgemm_is_fast,
        int8_is_fast,
        resolve_dtype,
        resolve_quantize,
    )

    assert not int8_is_fast(["avx2", "fma"])  # AVX2 alone: torch's int8 products are slower
    assert fbgemm_is_fast(["avx2", "fma"], ["x86", "fbgemm"])  # ... and fbgemm's are faster
    assert not fbgemm_is_fast(["avx", "sse4_2"], ["x86", "fbgemm"])  # below fbgemm's least ISA
    assert not fbgemm_is_fast(["avx2"], ["qnnpack"])  # a torch built without fbgemm
    assert int8_is_fast(["avx2", "avx_vnni"]) and int8_is_fast(["avx512f", "avx512_vnni"])
    assert not int8_is_fast(["avx512f", "avx512_vnni"], "avx2")  # oneDNN held below VNNI
    assert int8_is_fast(["avx512f", "avx512_vnni"], "AVX512_CORE_BF16")  # held below AMX only
    no_amx = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert not bf16_is_fast(no_amx, "AVX512")
    assert bf16_is_fast([*no_amx, "amx_bf16", "amx_tile"], "AVX512")
    assert not bf16_is_fast([*no_amx, "amx_bf16"], "AVX2")
    assert not bf16_is_fast([*no_amx, "amx_bf16"], "AVX512", "AVX512_CORE_BF16")  # AMX held off
    assert bf16_is_fast([*no_amx, "amx_bf16"], "AVX512", "avx10_1_512_amx")
    assert bf16_is_fast([*no_amx, "amx_bf16"], "AVX512", "")
    live = bf16_is_fast(
        Path("/proc/cpuinfo").read_text().split(),
        torch.backends.cpu.get_cpu_capability(),
        os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL"),
    )
    assert resolve_dtype("auto") == (torch.bfloat16 if live else torch.float32)
    flags = Path("/proc/cpuinfo").read_text().split()
    int8 = not live and int8_is_fast(flags, os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL"))
    fbgemm = not live and fbgemm_is_fast(flags, torch.backends.quantized.supported_engines)
    expected = "int8" if int8 else "int8_fbgemm" if fbgemm else "none"
    assert resolve_quantize("auto", "auto", "cpu") == expected


def test_a_reply_with_no_digit_mass_is_a_failure_even_with_no_minimum(embedded_dir):
    """``llm.min_digit_mass: 0`` and a reply that puts no probability on any digit: a failure,
    not NaN probabilities marked as a score (the local backend reads its reply position as a
    server's top log-probs are read)."""
    import torch

    from hdeval.llm.local.backend import TransformersBackend

    backend = TransformersBackend(embedded_dir, dtype="float32", min_digit_mass=0.0)
    logprobs = torch.full((backend.config.vocab_size,), -float("inf"))
    logprobs[backend.tokenize("Country")[0]] = 0.0
    score = backend._digit_score(logprobs)
    assert not score.ok and score.expected is None
    assert "digit mass 0.000" in score.failure and "'Country'" in score.failure
    assert not backend.loaded  # reading a reply needs the tokenizer only
