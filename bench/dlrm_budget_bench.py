#!/usr/bin/env python3
"""Recommendation out of core at tight budgets: what each storage.budget buys (the planner's
choice, cache, write-back buffer and read-ahead rows, the activations it planned), its speed and
its peak resident set against the plan. With --before, another build runs the same budgets
interleaved in every round, so the two are compared under the same noise.

  /usr/bin/python3 bench/dlrm_budget_bench.py --budgets 300MiB,318MiB,340MiB --rounds 3 \\
      --before /tmp/before/sluice
  /usr/bin/python3 bench/dlrm_budget_bench.py --mlp 1024 --shards 12 --steps 40 --budgets 400MiB,500MiB

The click log (generated here unless --data): 300,000 samples, 26 tables of 100,000 rows (ids
modulo), 13 dense features, batch 2048, one epoch (or --steps), no evaluation. Medians of the
rounds.
"""
import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = "/usr/bin/python3" if pathlib.Path("/usr/bin/python3").exists() else sys.executable


def make_data(path: pathlib.Path) -> None:
    out = subprocess.run([PY, str(ROOT / "scripts/sluice_prep.py"), "gen-clicks", "--samples", "300000",
                          "--sparse", "26", "--dense", "13", "--vocab", "200000", "--seed", "1", "--out", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dlrm_budget_bench: gen-clicks failed: {out.stderr.strip()}")


def config(tmp: pathlib.Path, data: pathlib.Path, a) -> pathlib.Path:
    mlps = f"bottom: [{a.mlp}, {a.mlp}, 16], top: [{a.mlp}, {a.mlp}]" if a.mlp else "bottom: [64, 16], top: [64]"
    shards = f", virtual_shards: {a.shards}" if a.shards else ""
    cfg = tmp / "budget.yaml"
    cfg.write_text(f"task: recommendation\ndataset: {data}\nrun_dir: {tmp / 'run'}\nprogress: false\n"
                   "checkpoint_every: 0\n"
                   f"model: {{dim: 16, {mlps}, ids: modulo, table_rows: 100000}}\n"
                   f"train: {{epochs: 1, batch: 2048, lr: 0.05, seed: 1, max_steps: {a.steps}{shards}}}\n"
                   "eval: {every: 0}\nstorage: {mode: out_of_core, budget: 400MiB}\n")
    return cfg


def run(binary: str, cfg: pathlib.Path, budget: str) -> dict:
    out = subprocess.run([binary, "train", str(cfg), "--overwrite", "--set", f"storage.budget={budget}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip() or out.stdout.strip()).splitlines()[-1]}
    s = json.loads((cfg.parent / "run/summary.json").read_text())
    line = next(l for l in out.stdout.splitlines() if "memory: out of core" in l)

    def rows(what: str) -> str:
        m = re.search(what + r" ([\d.]+[kM]?) rows", line)
        return m.group(1) if m else "-"
    act = re.search(r"activations ([\d.]+ [KMG]iB)", line)
    return {"rate": s["units_per_s"], "rss": s["peak_rss_bytes"] / 2**20,
            "plan": s.get("predicted_peak_bytes", 0) / 2**20, "planner": s["lookahead"]["planner"],
            "window": s["lookahead"]["window"], "cache": rows("cache"), "staged": rows("write-back buffer"),
            "ahead": rows("read-ahead"), "act": act.group(1) if act else "-"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="", help="a click log (default: generated here)")
    p.add_argument("--budgets", default="300MiB,318MiB,340MiB")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=0, help="train.max_steps (0: the whole epoch)")
    p.add_argument("--mlp", type=int, default=0, help="MLPs two layers this wide (default: 64 wide, one layer)")
    p.add_argument("--shards", type=int, default=0, help="train.virtual_shards (0: whole steps)")
    p.add_argument("--bin", default=str(ROOT / "build/release/train/sluice"))
    p.add_argument("--before", default="", help="another build's sluice, run interleaved beside --bin")
    a = p.parse_args()
    builds = [("this", a.bin)] + ([("before", a.before)] if a.before else [])
    budgets = a.budgets.split(",")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        data = pathlib.Path(a.data) if a.data else tmp / "clicks"
        if not a.data:
            make_data(data)
        cfg = config(tmp, data, a)
        runs = {(b, n): [] for b in budgets for n, _ in builds}
        for r in range(a.rounds):
            for b in budgets:
                for n, binary in (builds if r % 2 == 0 else builds[::-1]):
                    runs[(b, n)].append(run(binary, cfg, b))
    print(f"recommendation out of core, MLPs {a.mlp or 64} wide, {'virtual shards ' + str(a.shards) if a.shards else 'whole steps'}, "
          f"{a.steps or 'all'} steps; medians of {a.rounds} rounds\n")
    print("| budget | build | planner | cache rows | write-back rows | read-ahead rows | activations | samples/s | "
          "peak RSS MiB | planned MiB |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for b in budgets:
        for n, _ in builds:
            rs = runs[(b, n)]
            ok = [x for x in rs if "error" not in x]
            if not ok:
                print(f"| {b} | {n} | fails: {rs[0]['error']} | | | | | | | |")
                continue
            f = ok[-1]
            planner = f["planner"] + (f" window {f['window']}" if f["planner"] == "oracle" else "")
            print(f"| {b} | {n} | {planner} | {f['cache']} | {f['staged']} | {f['ahead']} | {f['act']} | "
                  f"{statistics.median(x['rate'] for x in ok):,.0f} | {statistics.median(x['rss'] for x in ok):.0f} | "
                  f"{f['plan']:.0f} |")


if __name__ == "__main__":
    main()
