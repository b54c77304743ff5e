"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def embedded_dir() -> Path:
    """Hugging Face directory of the embedded model (assembled and verified on first use)."""
    from hdeval.llm import embedded

    return embedded.pull()


@pytest.fixture(scope="session")
def embedded_gguf(embedded_dir: Path) -> Path:
    from hdeval.llm import embedded

    return embedded.model_dir() / embedded.QWEN_05B.gguf_filename


@pytest.fixture(scope="session")
def embedded_backend(embedded_dir: Path):
    from hdeval.llm.local import TransformersBackend

    return TransformersBackend(embedded_dir)


@pytest.fixture(scope="session")
def summeval_rows() -> list[dict]:
    """The first 32 SummEval rows (two documents x 16 systems), as shipped under data/."""
    path = REPO / "data" / "summeval" / "summeval.jsonl"
    with open(path, encoding="utf-8") as handle:
        return [json.loads(next(handle)) for _ in range(32)]


@pytest.fixture(scope="session")
def llama_server(embedded_gguf: Path) -> Iterator[str]:
    """Base URL of a llama.cpp server on the embedded GGUF, using the GGUF's chat template."""
    from tests.servers import run_llama_server

    threads = str(len(os.sched_getaffinity(0)))
    with run_llama_server(
        embedded_gguf, chat_format=None, extra_args=("--n_threads", threads)
    ) as base_url:
        yield base_url


@pytest.fixture(scope="session")
def vllm_server(embedded_dir: Path) -> Iterator[str]:
    """Base URL of a vLLM server (CPU build) on the embedded judge's converted weights."""
    from tests.servers import run_vllm_server

    with run_vllm_server(embedded_dir) as (base_url, _):
        yield base_url
