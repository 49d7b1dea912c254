#!/usr/bin/env python3
"""The device row cache's planners: rows copied to the device by lru and by the oracle (and,
for node classification, static by in-degree) in the same device.gpu_budget, measured in one
run on one machine.

Recommendation: a generated Zipf click log (gen-clicks; --sparse tables of --vocab ids, ids
modulo the table rows), tables in host RAM (storage.mode in_memory: what is measured is the
device's cache, not the host's). Node classification: a gen-nc graph's feature rows
(64 floats), features in host RAM. For each gpu_budget (a share of the rows' bytes) (the rows it
caches, as a share of all rows, beside the two steps in flight and their staging) and planner:
one epoch; the summary's rows copied in, the cache's hits, the host's seconds planning the cache
and the epoch's wall time, medians of --rounds rounds run interleaved. Every planner must train
the same bits (dense.pt compared); the bench fails otherwise.

On this machine it runs the emulated device (the GPU path's logic on the CPU: copies and hits
are exact, times are the CPU's); on a GPU machine pass --device cuda and a CUDA build's --bin.

  /usr/bin/python3 bench/device_cache_bench.py --rounds 3 [--workloads dlrm,nc] [--device cuda --bin BIN]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
PREP = [PY, str(ROOT / "scripts" / "sluice_prep.py")]

DLRM = """task: recommendation
dataset: {ds}
run_dir: {run}
progress: false
model: {{dim: 16, bottom: [64], top: [64], ids: modulo, table_rows: {rows}, linear: false}}
train: {{epochs: {epochs}, batch: {batch}, optimizer: sgd, lr: 0.05, seed: 1}}
eval: {{every: 0}}
storage: {{mode: in_memory}}
device: {{type: {device}, gpu_budget: {gpu_budget}, planner: {planner}}}
"""

NC = """task: node_classification
dataset: {ds}
run_dir: {run}
progress: false
model: {{kind: graphsage, layers: 2, hidden: 32, fanouts: [10, 5]}}
train: {{epochs: {epochs}, batch: {batch}, lr: 0.01, seed: 1}}
eval: {{every: 0}}
storage: {{mode: in_memory}}
device: {{type: {device}, gpu_budget: {gpu_budget}, planner: {planner}}}
"""


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def train(binary: pathlib.Path, config: str, run: pathlib.Path) -> dict:
    run.mkdir(parents=True, exist_ok=True)
    path = run.parent / (run.name + ".yaml")
    path.write_text(config)
    start = time.perf_counter()
    out = subprocess.run([str(binary), "train", str(path)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{path}: sluice failed: {out.stderr.strip()[-600:]}")
    summary = json.loads((run / "summary.json").read_text())
    ckpt = sorted(p for p in (run / "checkpoints").iterdir() if p.is_dir())[-1]
    return {"device": summary["device"], "wall": wall, "dense": (ckpt / "dense.pt").read_bytes()}


def staging_bytes(binary, make_config, tmp: pathlib.Path) -> int:
    """The device memory a run takes besides its cached rows (two steps' rows and their staging),
    from the error a budget too small for it gives."""
    path = tmp / "probe.yaml"
    path.write_text(make_config(tmp / "probe", 1024, "lru"))
    out = subprocess.run([str(binary), "train", str(path)], capture_output=True, text=True)
    m = re.search(r"cannot hold two steps' rows \(([\d.]+ \w+)\) and their staging \(([\d.]+ \w+)\)", out.stderr)
    if m is None:
        sys.exit(f"probe: expected a gpu_budget error, got: {out.stderr.strip()[-400:]}")
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    size = lambda t: float(t.split()[0]) * units[t.split()[1]]
    return int(size(m.group(1)) + size(m.group(2))) + (1 << 20)


def table(binary, rounds, make_config, budgets, planners, row_bytes_total, total_rows) -> None:
    print("| gpu_budget (rows cached: share of all) | planner | rows copied in | vs lru | hits | lookahead (steps) | "
          "cache plan (s) | run (s) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="sluice-devcache-") as tmp:
        reserved = staging_bytes(binary, make_config, pathlib.Path(tmp))
        for share in budgets:
            budget = reserved + int(share * row_bytes_total)
            runs = {p: [] for p in planners}
            for r in range(rounds):
                for p in planners:
                    runs[p].append(train(binary, make_config(pathlib.Path(tmp) / f"{share}-{p}-{r}", budget, p),
                                         pathlib.Path(tmp) / f"{share}-{p}-{r}"))
            dense = {p: {x["dense"] for x in runs[p]} for p in planners}
            first = next(iter(dense[planners[0]]))
            for p in planners:
                if dense[p] != {first}:
                    sys.exit(f"gpu_budget {budget}: planner {p} trained other bits than {planners[0]}")
            lru_loads = runs["lru"][0]["device"]["rows_loaded"] if "lru" in runs else None
            for p in planners:
                d = runs[p][0]["device"]  # copies and hits do not vary between rounds
                loads = d["rows_loaded"]
                vs = f"{loads / lru_loads:.3f}" if lru_loads else ""
                plan = statistics.median(x["device"]["stage_plan_s"] for x in runs[p])
                wall = statistics.median(x["wall"] for x in runs[p])
                print(f"| {budget / (1 << 20):,.1f} MiB ({d['cache_rows']:,}: {d['cache_rows'] / total_rows:.0%}) | {p} | {loads:,} | {vs} | "
                      f"{1 - loads / d['rows']:.1%} | {d.get('lookahead_steps', 0):.1f} | {plan:.3f} | {wall:.1f} |",
                      flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    ap.add_argument("--device", default="emulated", choices=["emulated", "cuda"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=400_000)
    ap.add_argument("--sparse", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=1_000_000)
    ap.add_argument("--table-rows", type=int, default=250_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--budgets", default="0.02,0.05,0.1",
                    help="rows cached beyond the steps in flight, as shares of the rows' bytes")
    ap.add_argument("--workloads", default="dlrm,nc", help="dlrm, nc or both")
    ap.add_argument("--nc-nodes", type=int, default=300_000)
    args = ap.parse_args()
    budgets = [float(x) for x in args.budgets.split(",")]
    with tempfile.TemporaryDirectory(prefix="sluice-devcache-data-") as data:
        ds = pathlib.Path(data) / "clicks"
        workloads = args.workloads.split(",")
        if "dlrm" in workloads:
            bench_dlrm(args, ds, budgets)
        if "nc" in workloads:
            bench_nc(args, pathlib.Path(data) / "graph", budgets)
    return 0


def bench_dlrm(args, ds: pathlib.Path, budgets: list[float]) -> None:
    subprocess.run(PREP + ["gen-clicks", "--samples", str(args.samples), "--sparse", str(args.sparse),
                           "--dense", "4", "--vocab", str(args.vocab), "--seed", "1", "--out", str(ds)],
                   check=True, capture_output=True)
    rows_bytes = args.sparse * args.table_rows * 16 * 4  # dim 16, sgd: no state
    print(f"\n### Recommendation, device {args.device}: {args.samples:,} samples, {args.sparse} tables x "
          f"{args.table_rows:,} rows x 64 B = {rows_bytes / (1 << 20):.0f} MiB of rows, batch {args.batch}, "
          f"{args.epochs} epochs, medians of {args.rounds}\n")

    def dlrm(run, budget, planner):
        return DLRM.format(ds=ds, run=run, rows=args.table_rows, batch=args.batch, epochs=args.epochs,
                           device=args.device, gpu_budget=budget, planner=planner)
    table(args.bin, args.rounds, dlrm, budgets, ["lru", "oracle"], rows_bytes, args.sparse * args.table_rows)


def bench_nc(args, g: pathlib.Path, budgets: list[float]) -> None:
    subprocess.run(PREP + ["gen-nc", "--nodes", str(args.nc_nodes), "--edges", str(10 * args.nc_nodes),
                           "--features", "64", "--classes", "8", "--seed", "1", "--out", str(g)],
                   check=True, capture_output=True)
    rows_bytes = args.nc_nodes * 64 * 4
    print(f"\n### Node classification's feature rows, device {args.device}: {args.nc_nodes:,} nodes, "
          f"{rows_bytes / (1 << 20):.0f} MiB of rows, batch 1024, {args.epochs} epochs, medians of {args.rounds}\n")

    def nc(run, budget, planner):
        return NC.format(ds=g, run=run, batch=1024, epochs=args.epochs, device=args.device, gpu_budget=budget,
                         planner=planner)
    table(args.bin, args.rounds, nc, budgets, ["lru", "oracle", "static"], rows_bytes, args.nc_nodes)


if __name__ == "__main__":
    sys.exit(main())
