# Sourced by the other scripts: the repo root, the Python that has numpy, the build.
set -euo pipefail
SLUICE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SLUICE_ROOT

# Debian's python3 (with python3-numpy etc.) lives at /usr/bin/python3; the first python3 on
# PATH may be another interpreter without them.
sluice_python() {
  local candidate
  for candidate in "${SLUICE_PYTHON:-}" /usr/bin/python3 python3; do
    [[ -n "$candidate" ]] || continue
    if "$candidate" -c 'import numpy, pytest' >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  echo "no python3 with numpy and pytest found (run scripts/install_deps.sh)" >&2
  return 1
}

# Configures and builds a CMake preset (release by default) with ccache.
sluice_build() {
  local preset=${1:-release}
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/sluice-ccache}
  (cd "$SLUICE_ROOT" && cmake --preset "$preset" >/dev/null)
  cmake --build --preset "$preset" -j "$(nproc)"
}
