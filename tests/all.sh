#!/usr/bin/env bash
# Every test: the workspace's (with the LLVM tier built in), the CPU kernels' and the fuzzer's
# again on the LLVM tier's kernels, and the ONNX node suite on each backend. Installs what it
# needs on a fresh Debian bookworm machine: MLIR 19 for the llvm feature (apt, as root or
# through sudo), and the ONNX venv (conformance.py, on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
tests/mlir-toolchain.sh
cargo test --workspace --locked --features graphc/llvm
GRAPHC_TEST_TIER=llvm cargo test --locked -p graphc --features llvm --test jit --test differential
GRAPHC_FEATURES=llvm python3 tests/onnx/conformance.py
