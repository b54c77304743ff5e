#!/usr/bin/env bash
# Run the test suite: installs the test-only tools first (pytest, ruff, and a llama.cpp
# OpenAI-compatible server used as a real peer), then lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --quiet -e ".[all,dev]"
if ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
    # Portable AVX2 build: the default native build crashes in AMX kernels on some CPUs.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF" \
        .venv/bin/python -m pip install --quiet "llama-cpp-python[server]==0.3.36"
fi
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
