#!/usr/bin/env bash
# Installs MLIR/LLVM 19 for the llvm feature (melior 0.20 builds against it): Debian
# bookworm's packages, where they are missing. .cargo/config.toml points the build at
# /usr/lib/llvm-19.
set -euo pipefail
exec "$(dirname "$0")/apt-install.sh" llvm-19-dev libmlir-19-dev mlir-19-tools libpolly-19-dev libclang-dev libzstd-dev libz3-dev libxml2-dev zlib1g-dev
