#!/usr/bin/env bash
# Runs the tests from a fresh clone: installs what is missing, checks function lengths, builds
# the release preset, runs ctest (unit, integration, e2e) and pytest.
#   bash scripts/test.sh          # CI's tier: everything but the suites marked slow
#   bash scripts/test.sh --full   # also the slow suites (ctest label / pytest marker `slow`: the
#                                 # 20-run crash tests among them) and the soak (scripts/soak.py)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SLUICE_ROOT"
full=0
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
  *) echo "test.sh: unknown flag '$1' (expected --full)" >&2; exit 2 ;;
esac
bash scripts/install_deps.sh
bash scripts/check_function_length.sh
export SLUICE_DATASETS=${SLUICE_DATASETS:-$SLUICE_ROOT/../shared/datasets}
sluice_build release
py=$(sluice_python)
export SLUICE_BIN=$SLUICE_ROOT/build/release/train/sluice
if ((full)); then
  ctest --preset release -j "$(nproc)"
  "$py" -m pytest -q tests
  "$py" scripts/soak.py --sluice "$SLUICE_BIN"
else
  ctest --preset release -j "$(nproc)" -LE slow
  "$py" -m pytest -q -m "not slow" tests
fi
