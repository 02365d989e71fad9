#!/usr/bin/env bash
# Every check and test (what .ci/run runs): formatting, clippy with and without the llvm
# feature, then the workspace's (with the LLVM tier and the GPU backend built in; every
# example's PTX through ptxas), the CPU kernels' and the fuzzer's again on the LLVM tier's
# kernels, and the ONNX node suite on each backend. Installs what it needs on a fresh Debian
# bookworm machine: MLIR 19 for the llvm feature and Open MPI's mpirun (apt, as root or through
# sudo), ptxas from
# NVIDIA's PyPI wheel, and the ONNX venv (conformance.py, on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-off build gains nothing from incremental state, which doubles the build directory.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
cargo --version
cargo fmt --all -- --check
tests/mlir-toolchain.sh
# mpirun, which launches a parameter-server training in compiler/tests/distributed.rs.
tests/apt-install.sh openmpi-bin
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --workspace --all-targets --locked --features graphc/llvm -- -D warnings
# ptxas, for the GPU tests' check of every example's PTX, from NVIDIA's wheel (no CUDA needed).
ptxas=target/ptxas/nvidia/cuda_nvcc/bin/ptxas
if [ ! -x "$ptxas" ]; then
    mkdir -p target/ptxas
    python3 -m pip download -q --no-deps nvidia-cuda-nvcc-cu12==12.9.86 -d target/ptxas
    python3 -c "import glob, zipfile; zipfile.ZipFile(glob.glob('target/ptxas/*.whl')[0]).extract('nvidia/cuda_nvcc/bin/ptxas', 'target/ptxas')"
    chmod +x "$ptxas"
fi
export GRAPHC_PTXAS="$PWD/$ptxas"
# The default build (what `cargo run -p graphc` gives), then graphc's own tests again with the
# llvm feature (the other crates do not change with it).
cargo test --workspace --locked
cargo test --locked -p graphc --features llvm
GRAPHC_TEST_TIER=llvm cargo test --locked -p graphc --features llvm --test jit --test differential
GRAPHC_FEATURES=llvm python3 tests/onnx/conformance.py
# The PyTorch exports the wheel ships, on the same backends.
GRAPHC_FEATURES=llvm python3 tests/onnx/conformance.py --suite pytorch-converted
GRAPHC_FEATURES=llvm python3 tests/onnx/conformance.py --suite pytorch-operator
# The node tests again through executables `graphc compile` writes (release builds).
python3 tests/onnx/conformance.py --backend aot
# The nine zoo CNNs on the JIT against their shipped outputs (release build).
python3 tests/onnx/models.py --backend jit
# The Python package as the README installs it (`pip install ./python`: a release build reusing
# the graphc library built above) and its pytest suite, against the reference interpreter.
bash python/test.sh
# The README's main command as a fresh machine runs it: build.sh (a release build with the LLVM
# tier, and the run-time library), then the example.
bash tests/readme.sh
