#!/usr/bin/env python3
"""Link-prediction throughput: configurations measured in the same run, medians of --rounds.

  FB15k-237, the Marius setup (DistMult d=50, batch 1000, 10 x 500 negatives per side):
    in memory with a global shuffle, and out of core (2 of 4 partitions resident); the same
    with reciprocal relations, an N3 penalty and Adagrad for the relations
    (configs/fb15k237_distmult_marius_n3*.yaml);
  a generated 2M-node / 20M-edge graph (batch 10,000, 10 x 100 negatives, 16 partitions,
    4 resident): out of core and in memory with the same schedule (their tables are compared
    byte for byte).

  /usr/bin/python3 bench/lp_bench.py --fb15k data/fb15k-237 --g20m data/g20m [--rounds 3]

Datasets: scripts/sluice_prep.py kg ... --partitions 4, and gen-graph + edges --partitions 16
(see configs/marius_g20m.yaml). Epoch times exclude evaluation and checkpoints.
"""
import argparse
import filecmp
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


# The fields of a run's summary.json this script reads (tests/e2e/test_run_lifecycle.py checks
# that sluice writes every one).
SUMMARY_FIELDS = ["peak_rss_bytes", "prefetcher.partition_loads"]


def train(binary, config, run_dir, sets):
    """Trains a fresh run; returns its metrics.jsonl rows and its summary.json."""
    args = [str(binary), "train", str(ROOT / "configs" / config), "--set", f"run_dir={run_dir}",
            "--set", "progress=false", "--set", "eval.every=0"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"lp_bench: {config} failed: {out.stderr.strip()}")
    rows = [json.loads(l) for l in (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    summary = pathlib.Path(run_dir) / "summary.json"  # (absent from builds before the training core)
    return rows, json.loads(summary.read_text()) if summary.exists() else {}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fb15k", type=pathlib.Path, help="FB15k-237 dataset (4 partitions)")
    p.add_argument("--g20m", type=pathlib.Path, help="generated 20M-edge dataset (16 partitions)")
    p.add_argument("--g100m", type=pathlib.Path,
                   help="generated 100M-edge dataset (32 partitions; configs/scale_g100m.yaml)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2,
                   help="FB15k-237 epochs per round; a round's time is the median of all but the first")
    p.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    args = p.parse_args()
    configs = []
    if args.fb15k:
        configs += [("FB15k-237, in memory, global shuffle", "fb15k237_distmult_marius.yaml",
                     [f"dataset={args.fb15k}", f"train.epochs={args.epochs}"], 5.4),
                    ("FB15k-237, out of core, 2 of 4 resident", "fb15k237_distmult_marius_ooc.yaml",
                     [f"dataset={args.fb15k}", f"train.epochs={args.epochs}"], 5.4),
                    ("FB15k-237 + reciprocal + N3 + relation Adagrad, in memory", "fb15k237_distmult_marius_n3.yaml",
                     [f"dataset={args.fb15k}", f"train.epochs={args.epochs}"], 5.4),
                    ("FB15k-237 + reciprocal + N3 + relation Adagrad, out of core, 2 of 4", "fb15k237_distmult_marius_n3_ooc.yaml",
                     [f"dataset={args.fb15k}", f"train.epochs={args.epochs}"], 5.4)]
    if args.g20m:
        configs += [("20M edges, out of core, 4 of 16 resident", "marius_g20m.yaml",
                     [f"dataset={args.g20m}"], 71.0),
                    ("20M edges, in memory, same schedule", "marius_g20m.yaml",
                     [f"dataset={args.g20m}", "storage.mode=in_memory"], 71.0)]
    pairs = []  # (out-of-core index, in-memory index) whose tables must be identical
    if args.g20m:
        pairs.append((len(configs) - 2, len(configs) - 1))
    if args.g100m:
        configs += [("100M edges, d=100, out of core, 2.5 GiB budget", "scale_g100m.yaml",
                     [f"dataset={args.g100m}"], None),
                    ("100M edges, d=100, in memory, same schedule", "scale_g100m.yaml",
                     [f"dataset={args.g100m}", "storage.mode=in_memory"], None)]
        pairs.append((len(configs) - 2, len(configs) - 1))
    if not configs:
        p.error("give --fb15k, --g20m and/or --g100m")
    times = {name: [] for name, *_ in configs}
    edges, rss, loads = {}, {}, {}
    with tempfile.TemporaryDirectory(dir=ROOT / "runs" if (ROOT / "runs").exists() else None) as tmp:
        for r in range(args.rounds):
            for i, (name, config, sets, _) in enumerate(configs):
                run_dir = pathlib.Path(tmp) / f"{i}-{r}"
                rows, summary = train(args.bin, config, run_dir, sets)
                # The epochs after the first (warm); their median (this machine's speed flips
                # between two levels for seconds at a time: one epoch is a coin flip).
                warm = rows[1:] or rows
                times[name].append(statistics.median(r["epoch_s"] for r in warm))
                edges[name] = warm[-1]["edges_per_s"] * warm[-1]["epoch_s"]
                rss.setdefault(name, []).append(summary.get("peak_rss_bytes", float("nan")))
                loads[name] = summary.get("prefetcher", {}).get("partition_loads", float("nan")) / len(rows)
                print(f"round {r + 1}: {name}: {times[name][-1]:.3f} s", file=sys.stderr)
            for a, b in pairs:
                same = filecmp.cmp(pathlib.Path(tmp) / f"{a}-{r}/tables/nodes.bin",
                                   pathlib.Path(tmp) / f"{b}-{r}/tables/nodes.bin", shallow=False)
                print(f"round {r + 1}: {configs[a][0]}: table == in memory: {same}", file=sys.stderr)
                if not same:
                    sys.exit("lp_bench: the out-of-core table differs from the in-memory one")
    print(f"\nlink prediction, medians of {args.rounds} rounds (a round: the median epoch time after its "
          "first epoch)\n")
    print("| configuration | epoch s | edges/s | Marius epoch s | vs Marius | partition loads/epoch | peak RSS |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for name, _, _, marius in configs:
        m = statistics.median(times[name])
        vs = f"{marius} | {marius / m:.2f}x" if marius else "- | -"
        print(f"| {name} | {m:.3f} | {edges[name] / m:,.0f} | {vs} | {loads[name]:.0f} | "
              f"{statistics.median(rss[name]) / 2**20:,.0f} MiB |")
    for a, b in pairs:
        ooc = statistics.median(times[configs[a][0]])
        mem = statistics.median(times[configs[b][0]])
        print(f"\n{configs[a][0]}: out-of-core / in-memory epoch time = {ooc / mem:.2f} "
              "(tables identical)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
