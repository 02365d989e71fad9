#!/usr/bin/env bash
# The Python package's tests, as a user installs it: `pip install ./python` (maturin builds the
# extension in release, in the workspace's target/, reusing the graphc library a release build
# of graphc left there) into tests/onnx/.venv, the ONNX suites' venv (made here if missing, as
# tests/onnx/onnx_common.py makes it, with onnx==1.22.0, which the tests use to write small
# ONNX models, and ml_dtypes for bfloat16), then pytest on python/tests.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$PWD/tests/onnx/.venv"
if [ ! -x "$venv/bin/python" ]; then
    echo "setting up $venv (onnx==1.22.0)"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q onnx==1.22.0
fi
"$venv/bin/python" -m pip install -q pytest ml_dtypes ./python
# From the tests' directory: from python/, the source tree's graphc/ (no extension in it)
# would shadow the installed package.
cd python/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
