#!/usr/bin/env bash
# Sanitizer builds, outside CI's budget: ASan+UBSan over everything (ctest, then the end-to-end
# suites of the training core run with the sanitized sluice binary), TSan over the torch-free
# modules (libtorch is not built with TSan).
#   bash scripts/sanitize.sh [debug|tsan]   (default: both)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SLUICE_ROOT"
bash scripts/install_deps.sh
export SLUICE_DATASETS=${SLUICE_DATASETS:-$SLUICE_ROOT/../shared/datasets}
for preset in ${1:-debug tsan}; do
  echo "== $preset =="
  sluice_build "$preset"
  ctest --preset "$preset" -j "$(nproc)"
  if [[ "$preset" == debug ]]; then
    # libtorch is not instrumented: its own allocations are not checked, ours are. Leak
    # checking is off (libtorch and OpenBLAS keep process-lifetime allocations).
    ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      SLUICE_BIN=$SLUICE_ROOT/build/debug/train/sluice \
      "$(sluice_python)" -m pytest -q -x tests/e2e/test_run_lifecycle.py tests/e2e/test_recommendation.py \
      tests/e2e/test_link_prediction.py
  fi
done
