#!/usr/bin/env bash
# Sanitizer builds, outside CI's budget: ASan+UBSan over everything, TSan over the torch-free
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
done
