"""Real OpenAI-compatible servers on 127.0.0.1 for the duration of some tests: llama.cpp's
(llama-cpp-python) and vLLM's CPU build, both on the embedded judge's weights."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

MODEL_ALIAS = "local"
REPO = Path(__file__).resolve().parents[1]
#: The virtual environment scripts/test.sh installs vLLM into (it pins another transformers).
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def serve(
    name: str, command: Sequence[str], port: int, startup_timeout: float
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start ``command`` (a server listening on ``port``) and yield its ``/v1`` base URL and
    process once ``/v1/models`` answers; stop it afterwards. Its output goes to a temporary
    log whose tail is shown if it fails to start."""
    base_url = f"http://127.0.0.1:{port}/v1"
    with tempfile.TemporaryFile(mode="w+b") as output:
        process = subprocess.Popen(list(command), stdout=output, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + startup_timeout
            while not _answers(f"{base_url}/models"):
                if process.poll() is not None or time.monotonic() > deadline:
                    output.seek(0)
                    tail = output.read().decode(errors="replace")[-3000:]
                    state = (
                        f"exited with {process.returncode}"
                        if process.poll() is not None
                        else (f"did not answer within {startup_timeout:.0f}s")
                    )
                    raise RuntimeError(f"{name} server {state}; its output ends:\n{tail}")
                time.sleep(0.25)
            yield base_url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def llama_command(
    gguf: Path,
    port: int,
    chat_format: str | None = "chatml",
    n_ctx: int = 2048,
    extra_args: tuple[str, ...] = (),
) -> list[str]:
    """``python -m llama_cpp.server`` on ``port``, serving ``gguf`` as :data:`MODEL_ALIAS`.

    ``chat_format=None`` lets the server use the chat template stored in the GGUF.
    """
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf),
        "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        *(("--chat_format", chat_format) if chat_format else ()),
        *extra_args,
    ]  # fmt: skip


@contextlib.contextmanager
def run_llama_server(
    gguf: Path,
    chat_format: str | None = "chatml",
    n_ctx: int = 2048,
    startup_timeout: float = 120.0,
    extra_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Start a llama.cpp server (:func:`llama_command`) on a free port; yield its ``/v1`` URL."""
    port = free_port()
    command = llama_command(gguf, port, chat_format, n_ctx, extra_args)
    with serve("llama.cpp", command, port, startup_timeout) as (base_url, _):
        yield base_url


def vllm_dtype() -> str:
    """bf16 where the CPU has bf16 instructions (AVX512-BF16 or AMX) and torch's kernels may
    use AVX512; fp32 elsewhere, where vLLM's CPU build emulates bf16 many times slower (an
    AVX2-only CPU). With the kernels held to AVX2 (``ATEN_CPU_CAPABILITY=avx2``, as
    ``benchmarks/default_run.py --isa avx2`` does) a bf16 server's worker dies on its first
    request (SIGILL), so such a run gets what an AVX2-only CPU gets."""
    import torch

    from hdeval.llm.local.precision import cpu_flags

    capped = torch.backends.cpu.get_cpu_capability() != "AVX512"
    return "float32" if capped or not {"avx512_bf16", "amx_bf16"} & set(cpu_flags()) else "bfloat16"


def vllm_command(
    weights: Path,
    port: int,
    max_model_len: int = 2048,
    eager: bool = True,
    prefix_caching: bool = False,
) -> list[str]:
    """vLLM's OpenAI-compatible server on the CPU, serving ``weights`` (a Hugging Face
    directory) as :data:`MODEL_ALIAS`. Its KV cache is a fixed 1 GiB (about 87,000 tokens of
    this model): on a CPU vLLM otherwise reserves a share of all RAM
    (``--gpu-memory-utilization``), and two servers beside the test process can then exhaust
    the machine. Prefix caching is off (vLLM's default is on) unless ``prefix_caching``:
    vLLM's prompt log-probabilities can depend on request order with it on. ``eager`` (the
    tests' choice) skips compiling the model: on a 2-core AVX2-only CPU compiling took about 2
    of the server's 3.4 minutes to start and made the tests' few requests only 5-10 % faster (a
    throughput benchmark compiles)."""
    if not VLLM_PYTHON.is_file():
        raise RuntimeError(
            f"vLLM is not installed in {VLLM_PYTHON.parent.parent}: run scripts/test.sh, which "
            "installs it there"
        )
    return [
        str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(weights),
        "--served-model-name", MODEL_ALIAS,
        "--dtype", vllm_dtype(),
        "--max-model-len", str(max_model_len),
        "--kv-cache-memory-bytes", "1G",
        "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
        *(["--enforce-eager"] if eager else []),
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip


@contextlib.contextmanager
def run_vllm_server(
    weights: Path,
    max_model_len: int = 2048,
    startup_timeout: float = 600.0,
    eager: bool = True,
    prefix_caching: bool = False,
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start vLLM (:func:`vllm_command`) on a free port; yield its ``/v1`` base URL and
    process."""
    port = free_port()
    command = vllm_command(weights, port, max_model_len, eager, prefix_caching)
    with serve("vLLM", command, port, startup_timeout) as served:
        yield served
