#!/usr/bin/env bash
# Builds graphc as users should run it: a release build with the LLVM tier (the host's widest
# vectors; MLIR/LLVM 19 from Debian bookworm's packages, installed where missing by
# tests/mlir-toolchain.sh, with apt as root or through sudo) and the run-time library that
# `graphc compile` links programs against (target/release/libgraphc_aot.a, beside graphc).
# Where the toolchain cannot be installed, or with --cranelift-only, it builds the Cranelift
# tier alone (needs only the Rust toolchain).
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
    "") llvm=1 ;;
    --cranelift-only) llvm=0 ;;
    *) echo "usage: bash build.sh [--cranelift-only]" >&2; exit 1 ;;
esac
features=()
if [ "$llvm" = 1 ]; then
    echo "build.sh: the LLVM tier needs MLIR/LLVM 19 (Debian's llvm-19-dev, libmlir-19-dev, mlir-19-tools and their -dev dependencies); installing what is missing" >&2
    if tests/mlir-toolchain.sh; then
        features=(--features graphc/llvm)
    else
        echo "build.sh: MLIR/LLVM 19 could not be installed; building the Cranelift tier only" >&2
    fi
fi
cargo build --release --locked -p graphc -p graphc-aot "${features[@]}"
tier="Cranelift tier only"
[ ${#features[@]} -gt 0 ] && tier="LLVM tier (--backend auto is the default)"
echo "build.sh: built target/release/graphc ($tier) and target/release/libgraphc_aot.a" >&2
