"""Run llama-cpp-python's OpenAI-compatible server on 127.0.0.1 for the duration of some tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

MODEL_ALIAS = "local"


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
def run_llama_server(
    gguf: Path,
    chat_format: str | None = "chatml",
    n_ctx: int = 2048,
    startup_timeout: float = 120.0,
    extra_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Start ``python -m llama_cpp.server`` on a free port and yield its ``/v1`` base URL.

    ``chat_format=None`` lets the server use the chat template stored in the GGUF. The server's
    output goes to a temporary log whose tail is shown if it fails to start.
    """
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf),
        "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        *(("--chat_format", chat_format) if chat_format else ()),
        *extra_args,
    ]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    with tempfile.TemporaryFile(mode="w+b") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
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
                    raise RuntimeError(f"llama.cpp server {state}; its output ends:\n{tail}")
                time.sleep(0.25)
            yield base_url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
