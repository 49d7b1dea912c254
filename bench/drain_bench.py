#!/usr/bin/env python3
"""What a step that does not fit the row cache beside the steps in flight costs.

Such a step waits until compute has finished the steps before it (all but the previous one when
compute reads a step ahead) and takes their slots (RowCache::PlaceAfterDrain); it used to end the
run with "row cache ... is full". This trains node classification on a generated graph, interleaved
over --rounds rounds, with:

  in memory       every feature row in RAM
  fits            out of core, storage.cache_rows holding the steps in flight (--fits rows)
  drains          out of core, storage.cache_rows below them (--drains rows): most steps drain

and prints the median nodes/s, the steps that drained and the rows loaded per step. Every run's
model is checked against the in-memory one (dense.pt, bit for bit).

  /usr/bin/python3 bench/drain_bench.py [--nodes 100000 --edges 1000000 --features 128]
      [--fits 24000 --drains 17000] [--rounds 3] [--work DIR]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    p.add_argument("--nodes", type=int, default=100000)
    p.add_argument("--edges", type=int, default=1000000)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--fits", type=int, default=24000, help="cache rows that hold the steps in flight")
    p.add_argument("--drains", type=int, default=17000, help="cache rows below the steps in flight")
    p.add_argument("--run-ahead", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", type=pathlib.Path)
    a = p.parse_args()
    work = a.work or pathlib.Path(tempfile.mkdtemp(prefix="sluice-drain-"))
    data = work / "data"
    if not (data / "manifest.json").exists():
        subprocess.run([sys.executable, str(ROOT / "scripts/sluice_prep.py"), "gen-nc", "--nodes", str(a.nodes),
                        "--edges", str(a.edges), "--features", str(a.features), "--seed", "1", "--partitions", "1",
                        "--out", str(data)], check=True, capture_output=True)
    ooc = f"{{mode: out_of_core, window: 1, run_ahead: {a.run_ahead}, cache_rows: "
    configs = {"in memory": "{mode: in_memory}", "fits": ooc + f"{a.fits}}}", "drains": ooc + f"{a.drains}}}"}
    results = {name: [] for name in configs}
    for r in range(a.rounds):
        for name, storage in configs.items():
            run_dir = work / f"run-{name.replace(' ', '_')}"
            cfg = work / "c.yaml"
            cfg.write_text("\n".join([
                "task: node_classification", f"dataset: {data}", f"run_dir: {run_dir}", "progress: false",
                "model: {kind: graphsage, layers: 2, hidden: 64, fanouts: [10, 5]}",
                f"train: {{epochs: 1, batch: {a.batch}, lr: 0.01, seed: 3}}", "eval: {every: 0}",
                f"storage: {storage}"]) + "\n")
            subprocess.run(["rm", "-rf", str(run_dir)], check=True)
            out = subprocess.run([str(a.bin), "train", str(cfg)], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{name}: {out.stderr.strip()}", file=sys.stderr)
                return 1
            s = json.loads((run_dir / "summary.json").read_text())
            latest = (run_dir / "checkpoints/latest").read_text().strip()
            dense = (run_dir / "checkpoints" / latest / "dense.pt").read_bytes()
            cache = s.get("cache", {})
            steps = max(1, cache.get("steps", 1))
            results[name].append((s["units_per_s"], cache.get("drained_steps", 0), cache.get("rows_loaded", 0) / steps,
                                  cache.get("capacity_rows", 0), dense))
            print(f"round {r + 1} {name}: {s['units_per_s']:,.0f} nodes/s", file=sys.stderr)
    mem = results["in memory"][0][4]
    print("| configuration | nodes/s (median) | vs in memory | cache rows | steps drained | rows loaded per step | model |")
    print("|---|---:|---:|---:|---:|---:|---|")
    base = statistics.median(x[0] for x in results["in memory"])
    for name, runs in results.items():
        speed = statistics.median(x[0] for x in runs)
        same = all(x[4] == mem for x in runs)
        print(f"| {name} | {speed:,.0f} | {speed / base:.2f} | {runs[0][3]:,} | {runs[0][1]:,} | {runs[0][2]:,.0f} | "
              f"{'bitwise the in-memory one' if same else 'DIFFERS'} |")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
