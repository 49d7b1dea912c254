#!/usr/bin/env python3
"""The partition schedule's quality gap: the same link-prediction config trained with the
global shuffle in memory and with the partition schedule out of core, over several seeds,
each run's filtered test MRR (its best validation checkpoint) and the gap of the medians.

  /usr/bin/python3 bench/lp_gap.py --config configs/fb15k237_distmult_marius_n3_ooc.yaml \
      --dataset DATA --resident 4 [--orderings split,rolling] [--seeds 1,2,3] \
      [--set KEY=VALUE ...]

DATA is prepared with the partition count wanted (`sluice_prep.py kg ... --partitions 16`, or
`gen-graph` then `edges --partitions 16`); `--resident R` trains R of them at once with one
slot more to load into. Both runs of a seed share every other setting.
"""
import argparse
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
MRR = re.compile(r"test MRR ([0-9.]+) .*?Hits@10 ([0-9.]+)")


def run(binary, config, run_dir, sets):
    """Trains a fresh run and evaluates its best checkpoint; returns (MRR, Hits@10, train s)."""
    args = [str(binary), "train", config, "--set", f"run_dir={run_dir}", "--set", "progress=false"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"lp_gap: {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    seconds = re.search(r"trained [0-9]+ edges in ([0-9.]+) s", out.stdout)
    train_s = float(seconds.group(1)) if seconds else float("nan")
    ev = subprocess.run([str(binary), "eval", str(run_dir), "--split", "test"], capture_output=True,
                        text=True)
    m = MRR.search(ev.stdout + ev.stderr)
    if ev.returncode != 0 or m is None:
        sys.exit(f"lp_gap: eval of {run_dir} failed:\n{ev.stderr[-2000:]}")
    return float(m.group(1)), float(m.group(2)), train_s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--resident", type=int, required=True, help="partitions trained at once")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--orderings", default="rolling",
                    help="partition orderings to compare (train.ordering), comma-separated")
    ap.add_argument("--set", action="append", default=[], help="extra overrides for both runs")
    ap.add_argument("--binary", default=str(ROOT / "build/release/train/sluice"))
    ap.add_argument("--work", default=None, help="run directories (default: a temporary one)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="lp_gap."))
    common = [f"dataset={args.dataset}"] + args.set
    setups = {"global shuffle, in memory": ["train.schedule=shuffle", "storage.mode=in_memory"]}
    for ordering in args.orderings.split(","):
        setups[f"{ordering}, {args.resident} resident, out of core"] = [
            "train.schedule=partitions", "storage.mode=out_of_core", f"train.ordering={ordering}",
            f"storage.resident={args.resident}", f"storage.slots={args.resident + 1}"]
    results = {name: [] for name in setups}
    for seed in seeds:  # interleaved: the machine's drift hits both setups alike
        for i, (name, sets) in enumerate(setups.items()):
            r = run(args.binary, args.config, work / f"s{seed}-{i}", common + sets + [f"train.seed={seed}"])
            results[name].append(r)
            print(f"seed {seed}, {name}: test MRR {r[0]:.4f} Hits@10 {r[1]:.4f} ({r[2]:.1f} s)",
                  flush=True)
    print(f"\n{args.config} on {args.dataset}, seeds {args.seeds}\n")
    print("| setup | test MRR per seed | median | mean | Hits@10 median | train s median |")
    print("|---|---|---:|---:|---:|---:|")
    medians = []
    for name, rs in results.items():
        mrr = [r[0] for r in rs]
        medians.append(statistics.median(mrr))
        print(f"| {name} | {', '.join(f'{x:.4f}' for x in mrr)} | {medians[-1]:.4f} | "
              f"{statistics.mean(mrr):.4f} | {statistics.median(r[1] for r in rs):.4f} | "
              f"{statistics.median(r[2] for r in rs):.1f} |")
    print()
    shuffle = next(iter(results.values()))
    for (name, rs), median in list(zip(results.items(), medians))[1:]:
        per_seed = [a[0] - b[0] for a, b in zip(shuffle, rs)]
        print(f"{name}: gap of medians {medians[0] - median:.4f}; per seed "
              f"{', '.join(f'{g:.4f}' for g in per_seed)}")


if __name__ == "__main__":
    main()
