#!/usr/bin/env bash
# The CPU kernels' tests and the differential fuzzer again, on the GPU's kernels (needs an
# NVIDIA GPU and the llvm feature's MLIR/LLVM 19; the GPU tests skip without a GPU, saying so).
# Not the test command (that is tests/all.sh, which .ci/run runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/mlir-toolchain.sh
GRAPHC_TEST_TIER=cuda cargo test -p graphc --features llvm --test jit --test differential
