#!/usr/bin/env bash
# scripts/gpu-check.sh on a GPU machine that cannot build ampcheck itself (no network, no
# Debian packages: a lent machine with only the CUDA toolkit, its libraries and PyTorch).
# Two halves:
#
#   scripts/gpu-remote.sh pack     here: builds the CUDA build (AMPCHECK_CUDA=ON, for
#                                  CUDA_ARCHS, default 90) in build-gpu and copies its
#                                  programs, stripped, with the shared libraries the other
#                                  machine lacks (fmt), into .gpu-pack/ (git-ignored)
#   scripts/gpu-remote.sh run      there, from the repository root with .gpu-pack/ beside
#                                  it: finds the machine's cuDNN, CUPTI and cuBLAS, then
#                                  runs scripts/gpu-check.sh on the packed build, writing
#                                  its results and logs into OUT_DIR (default $OUT, else
#                                  bench/results)
#   scripts/gpu-remote.sh exec CMD ...   there: runs one packed program (.gpu-pack/build-gpu/...)
#                                  with the libraries found the same way
#
# The packed programs were built on this machine's Debian (glibc 2.36, libstdc++ of GCC
# 12): the other machine's must be as new or newer. Everything after `run` is passed to
# gpu-check.sh's environment as it is (SAMPLES=..., BENCH_STEPS=..., SKIP_CTEST=1, ...).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pack=$root/.gpu-pack

die() {
  echo "gpu-remote: $*" >&2
  exit 2
}

# The programs gpu-check.sh runs: the CLI, every test binary, the benchmarks that time a GPU.
programs() {
  local dir=$1
  echo "$dir/cli/ampcheck"
  # The test binaries with GPU cases (the others are CPU-only: CI runs them).
  for t in gpu inspector op training unit; do [[ -x $dir/tests/ampcheck_${t}_tests ]] && echo "$dir/tests/ampcheck_${t}_tests"; done
  for b in ampcheck_bench_inspector ampcheck_bench_peer_step; do [[ -x $dir/bench/$b ]] && echo "$dir/bench/$b"; done
  return 0
}

case "${1:-}" in
  pack)
    dir=${AMPCHECK_BUILD_DIR:-$root/build-gpu}
    if [[ ! -f $dir/CMakeCache.txt ]]; then
      mkdir -p "$dir"
      cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAMPCHECK_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" >"$dir/configure.log" 2>&1 \
        || { cat "$dir/configure.log" >&2; exit 1; }
    fi
    cmake --build "$dir" -j "${AMPCHECK_JOBS:-$(nproc)}"
    rm -rf "$pack"
    mkdir -p "$pack/build-gpu/cli" "$pack/build-gpu/tests" "$pack/build-gpu/bench" "$pack/lib"
    while read -r p; do
      rel=${p#"$dir"/}
      strip -o "$pack/build-gpu/$rel" "$p"
    done < <(programs "$dir")
    # Every shared library the programs need from this machine's Debian packages (fmt, the
    # ONNX library, protobuf, libzip, OpenMPI and theirs, GoogleTest, Google Benchmark), but
    # glibc's and the compiler's runtime (the other machine's are as new or newer) and the
    # CUDA libraries (the other machine's own, found at `run`).
    ldd "$pack"/build-gpu/cli/ampcheck "$pack"/build-gpu/tests/* "$pack"/build-gpu/bench/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|librt.so*|libdl.so*|libutil.so*|libgcc_s.so*|libstdc++.so*|ld-linux*) ;;
        libcuda.so*|libcudart.so*|libcublas*.so*|libcudnn*.so*|libcupti.so*|libnccl.so*|libnvrtc*.so*|libnvJitLink.so*) ;;
        *) cp -L "$lib" "$pack/lib/" ;;
      esac
    done
    echo "$root" >"$pack/source_dir"
    # Compressed: what travels to a lent machine is limited in size.
    tar -C "$pack" -cJf "$pack/build.tar.xz" build-gpu lib
    rm -rf "$pack/build-gpu" "$pack/lib"
    echo "gpu-remote: packed $(du -sh "$pack" | cut -f1) into $pack"
    ;;
  run | exec)
    verb=$1
    shift
    [[ -f $pack/build.tar.xz && ! -x $pack/build-gpu/cli/ampcheck ]] && tar -C "$pack" -xJf "$pack/build.tar.xz"
    [[ -x $pack/build-gpu/cli/ampcheck ]] || die "no packed build in $pack: run 'scripts/gpu-remote.sh pack' on a machine that builds ampcheck"
    if [[ $verb == run ]]; then
      for kv in "$@"; do export "${kv?}"; done
    fi
    # The tests find their data through the source path compiled into them.
    built_root=$(cat "$pack/source_dir" 2>/dev/null || true)
    if [[ -n $built_root && $built_root != "$root" && ! -e $built_root ]]; then
      mkdir -p "$(dirname "$built_root")" && ln -s "$root" "$built_root"
    fi
    # The CUDA libraries: from the loader's cache where it knows them, else wherever the
    # machine keeps them (the toolkit's folders, PyTorch's nvidia-* wheels).
    libdirs=("$pack/lib")
    for lib in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libcupti.so.13; do
      ldconfig -p 2>/dev/null | grep -q "$lib" && continue
      found=$(find /usr/local/cuda* /usr/lib /opt /usr/local/lib -name "$lib" 2>/dev/null | head -1 || true)
      [[ -n $found ]] || die "$lib not found on this machine: install the CUDA toolkit (with cuDNN and CUPTI)"
      libdirs+=("$(dirname "$found")")
    done
    LD_LIBRARY_PATH=$(IFS=:; echo "${libdirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    echo "gpu-remote: LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
    [[ $verb == exec ]] && exec "$@"
    export AMPCHECK_PREBUILT=1 AMPCHECK_BUILD_DIR=$pack/build-gpu
    export OUT_DIR=${OUT_DIR:-${OUT:-$root/bench/results}}
    exec bash "$root/scripts/gpu-check.sh"
    ;;
  *)
    die "usage: scripts/gpu-remote.sh pack | run [NAME=VALUE...] | exec PROGRAM [ARG...]"
    ;;
esac
