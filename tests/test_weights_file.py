"""A 16-bit checkpoint quantised from its file a block of rows at a time computes what the
same model quantised in memory computes (a tiny random Qwen2, so no judge is needed)."""

from __future__ import annotations

import copy

import pytest
import torch

from hdeval.llm.local.int8 import INT8_LAYERS, quantize_int8
from hdeval.llm.local.weights_file import WeightsFile


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny bf16 Qwen2 saved in shards of about 20 kB (so the index file is read)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path, max_shard_size="20KB")
    return path


@pytest.mark.parametrize("kind", sorted(INT8_LAYERS))
def test_quantised_from_the_file_block_by_block_equals_quantised_in_memory(checkpoint, kind):
    from transformers import AutoModelForCausalLM

    assert (checkpoint / "model.safetensors.index.json").exists()
    weights = WeightsFile.of(checkpoint)
    assert weights is not None
    loaded = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16)
    linears = [(n, m) for n, m in loaded.named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(weights.holds(f"{n}.weight", m.weight) for n, m in linears)
    in_memory = quantize_int8(copy.deepcopy(loaded).float(), kind)
    from_file = quantize_int8(loaded, kind, weights)
    ids = torch.tensor([[1, 5, 42, 7, 299, 3]])
    with torch.inference_mode():
        assert torch.equal(from_file(ids).logits, in_memory(ids).logits)


def test_blocks_of_rows_put_together_are_the_tensor(checkpoint):
    from safetensors.torch import load_file

    weights = WeightsFile.of(checkpoint)
    stored = {}
    for shard in sorted(checkpoint.glob("*.safetensors")):
        stored.update(load_file(shard))
    name = "lm_head.weight"
    blocks = list(weights.row_blocks(name, rows=7))
    assert len(blocks) == -(-len(stored[name]) // 7)
    assert torch.equal(torch.cat(blocks), stored[name])
    assert not weights.holds(name, stored[name].float())  # its type, not only its shape
    assert WeightsFile.of(checkpoint / "missing") is None
