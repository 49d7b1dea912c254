#!/usr/bin/env python3
"""Recommendation (DLRM) benchmarks: configurations measured in the same run, medians of --rounds
(rounds interleave the configurations, so machine noise hits them alike).

  --planted DIR   out of core: a generated Zipf click log (26 tables, alpha 1.05, dim 16,
                  batch 2048, configs/clicks_planted.yaml; one table row per value of the log's
                  vocabulary: 26 x 1M rows of 72 bytes = 1.87 GB of tables against the default
                  400 MiB --budget for the whole process). In memory; row file with the oracle
                  (without and with read-ahead); row file with LRU (without and with
                  read-ahead); RocksDB with the oracle. samples/s,
                  out-of-core / in-memory, distinct rows, loads, disk reads and write-backs per
                  batch, peak RSS. Each run trains --steps steps from a fresh table.
  --torch DIR     against PyTorch: a log with 8 tables (ids modulo 1M rows), bottom MLP
                  13-512-256-16, top 512-256-1, batch 2048, SGD: bench/dlrm_reference.py (end to
                  end and compute only) and sluice in memory and out of core, same thread count.
  --movielens DIR quality: sluice's test AUC on MovieLens-100k (u1.base / u1.test) against a
                  logistic regression on one-hot user and item ids trained here.
  --quality DIR   quality: one epoch over the planted log out of core; test AUC against the
                  planted model's own AUC (from the manifest).

  /usr/bin/python3 bench/dlrm_bench.py --planted data/clicks-planted --torch data/clicks8 \\
      --movielens data/movielens-u1 [--rounds 3] [--steps 150] [--threads 1]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable


# The fields of a run's summary.json this script reads (tests/e2e/test_run_lifecycle.py checks
# that sluice writes every one).
SUMMARY_FIELDS = ["peak_rss_bytes", "cache.distinct_rows_per_step", "cache.hit_rate",
                  "cache.loads_per_step", "cache.write_backs_per_step", "cache.rows_read_per_step",
                  "cache.capacity_rows", "cache.steps", "memory.write_back_buffer_rows", "io.requests", "io.bytes",
                  "cache.epoch_start_loads", "cache.kept_rows", "cache.kept_steps", "cache.loads"]


def train(binary, config, run_dir, sets):
    """Trains a fresh run; returns its metrics.jsonl rows and its summary.json."""
    args = [str(binary), "train", str(config), "--set", f"run_dir={run_dir}", "--set", "progress=false"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dlrm_bench: {config} {' '.join(sets)} failed: {out.stderr.strip()}")
    rows = [json.loads(l) for l in (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return rows, json.loads((pathlib.Path(run_dir) / "summary.json").read_text())


def parse_summary(summary: dict) -> dict:
    """The figures the tables print, from summary.json (no cache section in memory)."""
    s = {"rss": summary["peak_rss_bytes"], "cache_rows": 0,
         "buffer_rows": summary["memory"]["write_back_buffer_rows"]}
    look = summary.get("lookahead")
    if look and look.get("chosen"):
        s["choice"] = look["planner"] + (" + read-ahead" if look["read_ahead"] else "")
    if look and look.get("window_chosen") and look["planner"] == "oracle":
        s["choice"] = s.get("choice", "") + (", " if "choice" in s else "") + f"window {look['window']}"
    io = summary.get("io", {})
    if io.get("queue_depth_chosen"):
        s["choice"] = s.get("choice", "") + (", " if "choice" in s else "") + f"io depth {io['queue_depth']}"
    cache = summary.get("cache")
    if cache:
        steps = max(1, cache["steps"])
        s.update(distinct=cache["distinct_rows_per_step"], hit=100 * cache["hit_rate"],
                 loads=cache["loads_per_step"], writes=cache["write_backs_per_step"],
                 reads=cache["rows_read_per_step"], cache_rows=cache["capacity_rows"],
                 requests=summary["io"]["requests"] / steps, mb=summary["io"]["bytes"] / steps / 1e6,
                 head=cache["epoch_start_loads"], kept=cache["kept_rows"], kept_steps=cache["kept_steps"],
                 loads_total=cache["loads"])
    return s


def bytes_of(text: str) -> float:
    v, unit = text.split()
    return float(v) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


def bench_planted(args, tmp):
    manifest = json.loads((pathlib.Path(args.planted) / "manifest.json").read_text())
    # One table row per value of the log's vocabulary (ids modulo the table size).
    table_rows = manifest["stats"].get("vocab_per_feature", 1_000_000)
    base = [f"dataset={args.planted}", f"train.max_steps={args.steps}", f"train.epochs={args.epochs}",
            "eval.every=0", "checkpoint_every=0",
            f"threads.compute={args.threads}", f"storage.budget={args.budget}", f"model.table_rows={table_rows}"]
    if args.layout:  # the same log with rows numbered by count: every out-of-core row again on it
        lay = json.loads((pathlib.Path(args.layout) / "manifest.json").read_text())
        if lay["stats"].get("layout", {}).get("source") != str(pathlib.Path(args.planted).resolve()):
            sys.exit(f"dlrm_bench: --layout {args.layout} is not `sluice_prep.py layout {args.planted}`'s output")
    configs = [("in memory", ["storage.mode=in_memory"]),
               ("row file, oracle", ["storage.backend=rowfile", "storage.planner=oracle"]),
               ("row file, oracle, read-ahead 0.25", ["storage.backend=rowfile", "storage.planner=oracle",
                                                     "storage.preload_share=0.25"]),
               ("row file, oracle, no write-back buffer", ["storage.backend=rowfile", "storage.planner=oracle",
                                                          "storage.write_back_share=0"]),
               ("row file, LRU", ["storage.backend=rowfile", "storage.planner=lru"]),
               ("row file, LRU, read-ahead 0.25", ["storage.backend=rowfile", "storage.planner=lru",
                                                  "storage.preload_share=0.25"]),
               ("row file, oracle, LRU's cache rows", ["storage.backend=rowfile", "storage.planner=oracle",
                                                      "storage.cache_rows=LRU"]),
               ("row file, auto (the cost model's choice)", ["storage.backend=rowfile", "storage.planner=auto"]),
               # The oracle's window fixed (the configs above size it at start-up: storage.window 0).
               ("row file, oracle, window 4", ["storage.backend=rowfile", "storage.planner=oracle", "storage.window=4"]),
               ("row file, oracle, window 16", ["storage.backend=rowfile", "storage.planner=oracle",
                                               "storage.window=16"]),
               # The io depth fixed at the old default (the configs above probe it: io.queue_depth 0).
               ("row file, oracle, io depth 32", ["storage.backend=rowfile", "storage.planner=oracle",
                                                 "io.queue_depth=32"]),
               # Without the first steps' rows kept for the next epoch (the configs above keep them
               # where at least 16 steps' rows fit 70% of the cache: storage.carry_rows 0.7).
               ("row file, oracle, no rows kept", ["storage.backend=rowfile", "storage.planner=oracle",
                                                  "storage.carry_rows=0"]),
               # RocksDB's block cache and memtables come out of the same budget.
               ("RocksDB, oracle", ["storage.backend=rocksdb", "storage.planner=oracle",
                                    "storage.rocksdb_cache=16MiB", "storage.rocksdb_memtable=8MiB"])]
    keys = ["mem", "oracle", "readahead", "direct", "lru", "lru-readahead", "oracle-lru-rows", "auto",
            "oracle-w4", "oracle-w16", "oracle-d32", "oracle-nokeep", "rocksdb"]
    if args.configs:
        wanted = args.configs.split(",")
        if unknown := set(wanted) - set(keys):
            sys.exit(f"dlrm_bench: --configs: unknown {sorted(unknown)}; choose from {keys}")
        if "oracle-lru-rows" in wanted and "lru" not in wanted:
            sys.exit("dlrm_bench: --configs: oracle-lru-rows needs lru (it uses LRU's cache size)")
        configs = [c for k, c in zip(keys, configs) if k in wanted or k == "mem"]
    if args.layout:
        configs += [(f"{name}, frequency layout", sets + [f"dataset={args.layout}"])
                    for name, sets in configs if name != "in memory" and "storage.cache_rows=LRU" not in sets]
    rate = {n: [] for n, _ in configs}
    info = {}
    for r in range(args.rounds):
        for i, (name, sets) in enumerate(configs):
            run_dir = pathlib.Path(tmp) / f"p{i}-{r}"
            # Same cache size as LRU's (which has no window ring and so more rows): loads compared alike.
            sets = [f"storage.cache_rows={int(info['row file, LRU']['cache_rows'])}" if x == "storage.cache_rows=LRU"
                    else x for x in sets]
            rows, summary = train(args.bin, ROOT / "configs/clicks_planted.yaml", run_dir, base + sets)
            rate[name].append(rows[-1]["samples_per_s"])
            info[name] = parse_summary(summary)
            chose = f" (chose {info[name]['choice']})" if "choice" in info[name] else ""
            print(f"round {r + 1}: {name}: {rows[-1]['samples_per_s']:,.0f} samples/s{chose}", file=sys.stderr)
            subprocess.run(["rm", "-rf", str(run_dir)])
    budget = bytes_of(args.budget.replace("MiB", " MiB").replace("GiB", " GiB"))
    table = manifest["record"]["sparse"] * table_rows * 72  # (16 + 1 linear + 1 state) floats per row
    print(f"\nDLRM out of core: {args.planted} ({manifest['record']['sparse']} tables, Zipf "
          f"{manifest['stats'].get('zipf_alpha')}), batch 2048, dim 16, {args.steps or 'all'} steps from fresh tables, "
          f"{args.threads} compute thread(s); tables {table / 2**30:.2f} GiB = {table / budget:.1f}x the "
          f"{args.budget} budget; medians of {args.rounds} rounds\n")
    print("| configuration | samples/s | vs in memory | cache rows | write-back buffer rows | distinct rows/batch | "
          "hit rate | loads/batch | disk reads/batch | write-backs/batch | disk requests/batch | MB/batch | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    mem = statistics.median(rate["in memory"])
    for name, _ in configs:
        m = statistics.median(rate[name])
        s = info[name]
        cache = (f"{s['cache_rows']:,.0f} | {s['buffer_rows']:,.0f} | {s['distinct']:,.0f} | {s['hit']:.1f}% | "
                 f"{s['loads']:,.0f} | {s['reads']:,.0f} | {s['writes']:,.0f} | {s['requests']:,.0f} | "
                 f"{s['mb']:.2f}") if "hit" in s else "- | - | - | - | - | - | - | - | -"
        label = f"{name}: {s['choice']}" if "choice" in s else name
        print(f"| {label} | {m:,.0f} | {m / mem:.2f} | {cache} | {s['rss'] / 2**20:,.0f} MiB |")
    if args.epochs > 1:  # samples/s above are the last epoch's
        print(f"\nRows loaded in each epoch's first 100 steps, rows kept for the next epoch (last round):\n")
        print("| configuration | first-100-step loads per epoch | rows kept (steps) | loads over the run |")
        print("|---|---|---:|---:|")
        for name, _ in configs:
            s = info[name]
            if "head" in s:
                print(f"| {name} | {', '.join(f'{x:,}' for x in s['head'])} | {s['kept']:,} ({s['kept_steps']}) | "
                      f"{s['loads_total']:,} |")


def bench_torch(args, tmp):
    sets = [f"dataset={args.torch}", f"train.max_steps={args.steps}", "eval.every=0", "checkpoint_every=0",
            f"threads.compute={args.threads}", "train.optimizer=sgd", "train.lr=0.1",
            "train.dense_optimizer=sgd", "train.dense_lr=0.1", f"storage.budget={args.budget}"]
    configs = [("sluice, in memory", ["storage.mode=in_memory"]),
               ("sluice, out of core (row file)", ["storage.backend=rowfile"]),
               ("sluice, out of core (RocksDB)", ["storage.backend=rocksdb"])]
    rate = {n: [] for n, _ in configs}
    ref_e2e, ref_compute = [], []
    for r in range(args.rounds):
        out = subprocess.run([PY, str(ROOT / "bench/dlrm_reference.py"), str(args.torch), "--steps", str(args.steps),
                              "--threads", str(args.threads)], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"dlrm_bench: the PyTorch reference failed: {out.stderr.strip()}")
        ref = json.loads(out.stdout.strip().splitlines()[-1])
        ref_e2e.append(ref["end_to_end_samples_per_s"])
        ref_compute.append(ref["compute_only_samples_per_s"])
        print(f"round {r + 1}: PyTorch reference: {ref}", file=sys.stderr)
        for i, (name, s) in enumerate(configs):
            run_dir = pathlib.Path(tmp) / f"t{i}-{r}"
            rows, _ = train(args.bin, ROOT / "configs/clicks_planted.yaml", run_dir, sets + s)
            rate[name].append(rows[-1]["samples_per_s"])
            print(f"round {r + 1}: {name}: {rows[-1]['samples_per_s']:,.0f} samples/s", file=sys.stderr)
            subprocess.run(["rm", "-rf", str(run_dir)])
    comp = statistics.median(ref_compute)
    print(f"\nDLRM against PyTorch: {args.torch}, 8 tables x 1M rows, dim 16, bottom 13-512-256-16, top "
          f"512-256-1, batch 2048, SGD, {args.steps} steps, {args.threads} thread(s); medians of {args.rounds}\n")
    print("| system | samples/s | vs PyTorch compute-only |\n|---|---:|---:|")
    print(f"| PyTorch reference, end to end | {statistics.median(ref_e2e):,.0f} | "
          f"{statistics.median(ref_e2e) / comp:.2f} |")
    print(f"| PyTorch reference, compute only | {comp:,.0f} | 1.00 |")
    for name, _ in configs:
        m = statistics.median(rate[name])
        print(f"| {name} (end to end) | {m:,.0f} | {m / comp:.2f} |")


def logistic_regression_auc(ds: pathlib.Path) -> float:
    """One-hot user and item ids, L2-regularised logistic regression by full-batch Adagrad."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from sluice_prep.gen_clicks import auc
    from sluice_prep.recsys import record_dtype
    manifest = json.loads((ds / "manifest.json").read_text())
    rec = record_dtype(manifest["record"]["sparse"], manifest["record"]["dense"])
    tr = np.fromfile(ds / manifest["files"]["samples.train"]["path"], dtype=rec)
    te = np.fromfile(ds / manifest["files"]["samples.test"]["path"], dtype=rec)
    cols = []
    for f in (0, 1):  # user, item
        vocab = {v: i for i, v in enumerate(np.unique(tr["sparse"][:, f]))}
        cols.append((vocab, len(vocab)))

    def features(r):
        idx = []
        off = 0
        for f, (vocab, n) in enumerate(cols):
            idx.append(np.array([vocab.get(v, -1) for v in r["sparse"][:, f]]) + off)
            idx[-1][idx[-1] < off] = -1
            off += n
        return np.stack(idx, 1), off

    xtr, n = features(tr)
    xte, _ = features(te)
    ytr = tr["label"].astype(np.float64)
    w, b = np.zeros(n + 1), 0.0  # the last weight is for unseen ids (zero)
    g2, gb2 = np.full(n + 1, 1e-8), 1e-8
    for _ in range(300):
        z = w[xtr].sum(1) + b
        p = 1 / (1 + np.exp(-z))
        err = p - ytr
        grad = np.zeros(n + 1)
        np.add.at(grad, xtr.ravel(), np.repeat(err, 2))
        grad = grad / len(ytr) + 1e-5 * w
        g2 += grad ** 2
        w -= 0.5 * grad / np.sqrt(g2)
        gb = err.mean()
        gb2 += gb ** 2
        b -= 0.5 * gb / np.sqrt(gb2)
        w[n] = 0
    return auc(w[xte].sum(1) + b, te["label"])


def bench_movielens(args, tmp):
    sluice_auc = []
    for r in range(args.rounds):
        rows, _ = train(args.bin, ROOT / "configs/movielens_dlrm.yaml", pathlib.Path(tmp) / f"ml{r}",
                        [f"dataset={args.movielens}", f"train.seed={r + 1}"])
        sluice_auc.append(rows[-1]["test"]["auc"])
    lr = logistic_regression_auc(pathlib.Path(args.movielens))
    print(f"\nMovieLens-100k u1.base / u1.test (rating >= 4 is a click), test AUC; sluice: "
          f"configs/movielens_dlrm.yaml, median of {args.rounds} seeds\n")
    print("| model | test AUC |\n|---|---:|")
    print(f"| logistic regression on user and item ids | {lr:.4f} |")
    print(f"| sluice DLRM (user, item, age, gender, occupation, genre) | {statistics.median(sluice_auc):.4f} |")


def bench_quality(args, tmp):
    manifest = json.loads((pathlib.Path(args.quality) / "manifest.json").read_text())
    rows, _ = train(args.bin, ROOT / "configs/clicks_planted.yaml", pathlib.Path(tmp) / "q",
                         [f"dataset={args.quality}", f"threads.compute={args.threads}"])
    last = rows[-1]
    print(f"\nPlanted click log {args.quality}: one epoch out of core "
          f"({last['samples_per_s']:,.0f} samples/s, {last['epoch_s']:.0f} s)\n")
    print("| model | test AUC |\n|---|---:|")
    print(f"| planted model (its true probabilities) | {manifest['stats']['planted_test_auc']:.4f} |")
    print(f"| sluice DLRM | {last['test']['auc']:.4f} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--planted", type=pathlib.Path)
    p.add_argument("--layout", type=pathlib.Path,
                   help="--planted: also run the out-of-core rows on this log (sluice_prep.py layout of --planted)")
    p.add_argument("--torch", type=pathlib.Path)
    p.add_argument("--movielens", type=pathlib.Path)
    p.add_argument("--quality", type=pathlib.Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=300, help="steps per epoch (0: a whole epoch)")
    p.add_argument("--epochs", type=int, default=1,
                   help="--planted: epochs per run (samples/s then the last epoch's; a table of each "
                        "epoch's first loads follows)")
    p.add_argument("--configs", help="--planted: a comma-separated subset of mem, oracle, readahead, direct, lru, "
                                     "lru-readahead, oracle-lru-rows, rocksdb (in memory always runs)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--budget", default="400MiB")
    p.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    args = p.parse_args()
    if not (args.planted or args.torch or args.movielens or args.quality):
        p.error("give --planted, --torch, --movielens and/or --quality")
    with tempfile.TemporaryDirectory(dir=args.planted.parent if args.planted else None) as tmp:
        if args.movielens:
            bench_movielens(args, tmp)
        if args.torch:
            bench_torch(args, tmp)
        if args.planted:
            bench_planted(args, tmp)
        if args.quality:
            bench_quality(args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
