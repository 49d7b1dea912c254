#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds, generates a power-law
# graph (200k nodes, 2M edges; no download), preprocesses it into 16 partitions, and trains
# DistMult embeddings on it out of core (4 of 16 partitions resident), printing loss, edges/s
# and validation MRR per epoch, then test metrics.
#   bash scripts/run_demo.sh [--set key=value ...]   (overrides for configs/demo_generated.yaml)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SLUICE_ROOT"
bash scripts/install_deps.sh
sluice_build release
PY=$(sluice_python)
if [[ ! -f data/demo-graph/manifest.json ]]; then
  mkdir -p data
  "$PY" scripts/sluice_prep.py gen-graph --out data/demo-graph.tsv --nodes 200000 --edges 2000000 --seed 1
  "$PY" scripts/sluice_prep.py edges data/demo-graph.tsv --out data/demo-graph --partitions 16 \
    --valid-frac 0.005 --test-frac 0.005
  rm -f data/demo-graph.tsv
fi
# A demo run starts over each time (--overwrite); a real run would use --resume to continue.
./build/release/train/sluice train configs/demo_generated.yaml --overwrite "$@"
./build/release/train/sluice eval runs/demo --split test
"$(sluice_python)" scripts/plot_metrics.py runs/demo || echo "(no plot: python3-matplotlib is missing)"
