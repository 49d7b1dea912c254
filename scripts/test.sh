#!/usr/bin/env bash
# Runs every test from a fresh clone: installs what is missing, builds the release preset,
# runs ctest (unit, integration, e2e) and pytest.
#   bash scripts/test.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SLUICE_ROOT"
bash scripts/install_deps.sh
export SLUICE_DATASETS=${SLUICE_DATASETS:-$SLUICE_ROOT/../shared/datasets}
sluice_build release
ctest --preset release -j "$(nproc)"
py=$(sluice_python)
SLUICE_BIN=$SLUICE_ROOT/build/release/train/sluice "$py" -m pytest -q tests
