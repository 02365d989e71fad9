#!/usr/bin/env bash
# Installs MLIR/LLVM 19 for the llvm feature (melior 0.20 builds against it): Debian
# bookworm's packages, where they are missing. .cargo/config.toml points the build at
# /usr/lib/llvm-19.
set -euo pipefail
packages=(llvm-19-dev libmlir-19-dev mlir-19-tools libpolly-19-dev libclang-dev libzstd-dev libz3-dev libxml2-dev zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
