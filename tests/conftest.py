"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: The test files that take longest (measured on one core of a 2-core AVX2-only CPU: the
#: pipeline's about 22 min, the vLLM server's 13, the local backend's 18): run first, so that
#: two workers running the model tests file by file (``--dist loadfile``) finish together.
SLOWEST_FILES = ("tests/test_pipeline.py", "tests/test_vllm.py", "tests/test_local_backend.py")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker keeps to its own share of the CPU cores, and so does
    every process it starts (a DVC stage, a model server): the judge reads its thread count
    from that share, so two model tests side by side do not slow each other down by running
    more threads than there are cores."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker and count > 1:
        share = sorted(os.sched_getaffinity(0))[int(worker.removeprefix("gw")) :: count]
        if share:
            os.sched_setaffinity(0, share)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first (:data:`SLOWEST_FILES`); every other test keeps its place."""

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        return SLOWEST_FILES.index(path) if path in SLOWEST_FILES else len(SLOWEST_FILES)

    items.sort(key=rank)


@pytest.fixture(scope="session")
def embedded_dir() -> Path:
    """Hugging Face directory of the embedded model (assembled and verified on first use)."""
    from hdeval.llm.local import embedded

    return embedded.pull()


@pytest.fixture(scope="session")
def embedded_gguf(embedded_dir: Path) -> Path:
    from hdeval.llm.local import embedded

    return embedded.model_dir() / embedded.QWEN_05B.gguf_filename


@pytest.fixture(scope="session")
def embedded_backend(embedded_dir: Path):
    from hdeval.llm.local.backend import TransformersBackend

    return TransformersBackend(embedded_dir)


def _unless_loaded(shared, backend):
    """``shared`` where ``backend`` names the same weights in the same precision (its identity),
    else ``backend``: each copy of the judge's weights holds about 2.4 GB in fp32, and a worker
    that kept one per fixture, beside a model server and a second worker's DVC stage, can
    exhaust a 24 GiB machine."""
    return shared if backend.identity == shared.identity else backend


@pytest.fixture(scope="session")
def fp32_backend(embedded_dir: Path, embedded_backend):
    """The judge in fp32 with no quantisation: the session's judge on a CPU that picks fp32."""
    from hdeval.llm.local.backend import TransformersBackend

    return _unless_loaded(embedded_backend, TransformersBackend(embedded_dir, dtype="float32"))


@pytest.fixture(scope="session")
def auto_precision_backend(embedded_dir: Path, embedded_backend):
    """The judge in the precision ``dtype: auto`` / ``quantize: auto`` picks on this CPU: bf16
    with AMX tiles, fp32 with int8 Linear layers with VNNI, plain fp32 otherwise. (A precision
    this CPU would never pick runs here many times slower than the one it picks, and is tested
    where it is picked.)"""
    from hdeval.llm.local.backend import TransformersBackend

    return _unless_loaded(embedded_backend, TransformersBackend(embedded_dir, quantize="auto"))


@pytest.fixture(scope="session")
def summeval_rows() -> list[dict]:
    """The first 32 SummEval rows of the development documents (two documents x 16 systems)."""
    from tests.dvc_project import development_rows

    return development_rows()[:32]


@pytest.fixture(scope="session")
def llama_server(embedded_gguf: Path) -> Iterator[str]:
    """Base URL of a llama.cpp server on the embedded GGUF, using the GGUF's chat template."""
    from tests.servers import run_llama_server

    threads = str(len(os.sched_getaffinity(0)))
    with run_llama_server(
        embedded_gguf, chat_format=None, extra_args=("--n_threads", threads)
    ) as base_url:
        yield base_url
