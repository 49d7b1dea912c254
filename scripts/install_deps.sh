#!/usr/bin/env bash
# Installs the Debian packages sluice builds, tests and benchmarks with.
# Idempotent: does nothing (no apt-get update either) when everything is present.
#
#   bash scripts/install_deps.sh          # lean profile: build + tests
#   bash scripts/install_deps.sh --full   # also what the benchmarks compare against (fio, ...)
#   bash scripts/install_deps.sh --fuzz   # also clang and its libFuzzer (scripts/fuzz.sh)
set -euo pipefail

lean=(
  build-essential cmake ninja-build ccache pkg-config git universal-ctags
  libtorch-dev liburing-dev librocksdb-dev libtbb-dev libcli11-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas0-pthread zlib1g-dev libgloo-dev
  libjemalloc-dev  # the executable's malloc (train/allocator.h)
  python3 python3-numpy python3-scipy python3-pytest
  python3-torch  # the node-classification tests' dense reference
)
full=(fio python3-matplotlib time)
fuzz=(clang libclang-rt-dev)

want=("${lean[@]}")
case "${1:-}" in
  --full) want+=("${full[@]}") ;;
  --fuzz) want+=("${fuzz[@]}") ;;
  ""|--lean) ;;
  -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
  *) echo "install_deps.sh: unknown flag '$1' (expected --lean, --full or --fuzz)" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#want[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
