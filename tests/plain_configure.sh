#!/usr/bin/env bash
# A plain `cmake -S SRC -B DIR` (no preset, no options) with nvcc present configures and generates
# with the CUDA device on: the CUDA architectures are settled before any target exists (a target
# made earlier keeps an empty CUDA_ARCHITECTURES, which CMake refuses when it generates).
# Usage: plain_configure.sh SRC DIR. Exit 77 (skipped) without nvcc.
set -euo pipefail
src=$1
dir=$2
nvcc=$(command -v nvcc || true)
extra=()
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  nvcc=/usr/local/cuda/bin/nvcc
  extra=(-DCMAKE_CUDA_COMPILER="$nvcc")  # not on PATH: say where it is, as a user would
fi
if [ -z "$nvcc" ]; then
  echo "no nvcc: skipped"
  exit 77
fi
rm -rf "$dir"
trap 'rm -rf "$dir"' EXIT
if ! out=$(cmake -S "$src" -B "$dir" "${extra[@]}" 2>&1); then
  echo "$out"
  echo "FAILED: a plain configure with nvcc present"
  exit 1
fi
echo "$out" | grep "tessera: CUDA" || { echo "$out"; echo "FAILED: the CUDA device was not configured"; exit 1; }
grep -q "^TESSERA_WITH_CUDA:BOOL=ON" "$dir/CMakeCache.txt" || { echo "FAILED: TESSERA_WITH_CUDA is not ON"; exit 1; }
echo "a plain configure with nvcc present: OK"
