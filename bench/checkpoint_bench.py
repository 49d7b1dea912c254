#!/usr/bin/env python3
"""Checkpoint cost: whole-table copies against incremental ones, measured in the same run.

Trains a config twice per round (checkpoint_incremental false, then true), with checkpoints at
every --every of an epoch (and at each epoch's end), and prints per configuration: checkpoints
written, the median seconds of one checkpoint, the median table bytes it wrote, the epoch's
training seconds and the final tables' equality.

  /usr/bin/python3 bench/checkpoint_bench.py --config configs/scale_g100m.yaml \\
      --set dataset=/work/big/g100m --every 0.1 --rounds 1 --run-dir /work/big/ckbench

The first two checkpoints of a run are whole copies either way (there is no older copy to
bring up to date); the table says how many of the others were incremental.
"""
import argparse
import filecmp
import json
import pathlib
import shutil
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The fields of a run's summary.json this script reads.
SUMMARY_FIELDS = ["train_s", "checkpoints.each", "checkpoints.table_copies_incremental"]


def train(binary, config, run_dir, sets):
    args = [str(binary), "train", str(config), "--set", f"run_dir={run_dir}", "--set", "progress=false",
            "--overwrite"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"checkpoint_bench: {config} failed: {out.stderr.strip()}")
    return json.loads((pathlib.Path(run_dir) / "summary.json").read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=pathlib.Path, required=True)
    p.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for every run")
    p.add_argument("--every", default="0.1", help="checkpoint_every (a fraction of an epoch)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--run-dir", type=pathlib.Path, required=True, help="where the runs go (removed after)")
    p.add_argument("--sluice", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    args = p.parse_args()
    kinds = [("whole copies", "false"), ("incremental", "true")]
    results = {k: [] for k, _ in kinds}
    for r in range(args.rounds):
        for label, flag in kinds:
            run_dir = args.run_dir / f"{flag}-{r}"
            sets = args.set + [f"checkpoint_every={args.every}", f"checkpoint_incremental={flag}", "eval.every=0"]
            s = train(args.sluice, args.config, run_dir, sets)
            c = s["checkpoints"]
            each = c["each"]
            table = next(pathlib.Path(run_dir, "tables").glob("*.bin"))
            results[label].append({"train_s": s["train_s"], "each": each, "incremental": c["table_copies_incremental"],
                                   "table": table})
            shutil.rmtree(run_dir / "checkpoints")  # room for the next run (an 8 GB table has 2-3 copies)
            print(f"round {r + 1} {label}: {len(each)} checkpoints, "
                  + ", ".join(f"{e['s']:.1f}" for e in each) + " s", flush=True)
        a, b = (results[k][-1]["table"] for k, _ in kinds)
        same = filecmp.cmp(a, b, shallow=False)
        for k, _ in kinds:
            results[k][-1]["same"] = same
        shutil.rmtree(args.run_dir / f"false-{r}")
        shutil.rmtree(args.run_dir / f"true-{r}")
    print("\n| configuration | checkpoints | incremental | s per checkpoint (median) | MB written per checkpoint "
          "(median) | checkpoint s in all | training s | tables equal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for label, _ in kinds:
        runs = results[label]
        each = [e for run in runs for e in run["each"]]
        print(f"| {label} | {len(each) // len(runs)} | {statistics.median(r['incremental'] for r in runs):.0f} | "
              f"{statistics.median(e['s'] for e in each):.2f} | "
              f"{statistics.median(e['table_bytes_written'] for e in each) / 1e6:,.0f} | "
              f"{statistics.median(sum(e['s'] for e in r['each']) for r in runs):.1f} | "
              f"{statistics.median(r['train_s'] for r in runs):.1f} | {all(r['same'] for r in runs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
