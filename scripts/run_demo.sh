#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds, and runs the storage demo
# (writes a row table, reads and updates random rows through io_uring, checks every byte).
#   bash scripts/run_demo.sh [--set key=value ...]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SLUICE_ROOT"
bash scripts/install_deps.sh
sluice_build release
./build/release/train/sluice demo-storage configs/storage_demo.yaml "$@"
