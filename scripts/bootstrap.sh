#!/usr/bin/env bash
# Installs what ampcheck builds against, from Debian packages only, and nothing that is
# already there: running it twice does nothing the second time.
#   scripts/bootstrap.sh [--fuzz]   --fuzz: also clang's libFuzzer, ASan and UBSan (scripts/fuzz.sh)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  ccache                # compiler cache: a rebuild of what an earlier build compiled is a lookup
  libfmt-dev            # fmt: formatting
  nlohmann-json3-dev    # nlohmann/json: reports and --json output
  libcli11-dev          # CLI11: the command line
  libopenblas-dev       # OpenBLAS: CPU GEMM
  libonnx-dev libprotobuf-dev  # ONNX: reading, checking and shape-inferring users' models
  libzip-dev            # libzip: numpy .npz archives (--data)
  zlib1g-dev            # zlib: gzipped GPU profiles (ampcheck kernels)
  libsqlite3-dev        # SQLite: Nsight Systems' SQLite exports (ampcheck kernels)
  libopenmpi-dev openmpi-bin  # OpenMPI: data-parallel training (mpirun -np N ampcheck run)
  libgtest-dev libgmock-dev googletest  # GoogleTest
  libbenchmark-dev      # Google Benchmark: bench/
  chromium              # tests: the HTML report rendered headless
  python3-jsonschema    # tests: reports validated against their JSON Schema
  libonnx-testdata      # tests: ONNX's own conformance data (node tests, PyTorch modules)
)
if [[ " $* " == *" --fuzz "* ]]; then
  packages+=(clang-14 libclang-rt-14-dev llvm-14)  # fuzz/: libFuzzer with ASan and UBSan
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2; exit 2; }
  sudo=(sudo)
fi
echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
