#!/usr/bin/env python3
"""Node-classification quality on the public Planetoid splits: each shipped Cora and CiteSeer
config (configs/{cora,citeseer}_{gcn,graphsage,gat}.yaml), unchanged but for the dataset path
and the seed, trained for seeds 1-5; test accuracy and macro-F1 at the best validation epoch
(the checkpoint `sluice eval` opens). Prints per-seed accuracies, mean, standard deviation and
the lowest seed against the bars (Cora: 0.80 GCN/GraphSage, 0.81 GAT; CiteSeer: 0.69).

  /usr/bin/python3 bench/nc_quality.py [--seeds 5] [--datasets DIR]   (DIR: SLUICE_DATASETS)
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BARS = {"cora": {"gcn": 0.80, "graphsage": 0.80, "gat": 0.81},
        "citeseer": {"gcn": 0.69, "graphsage": 0.69, "gat": 0.69}}
PUBLISHED = {("cora", "gcn"): 0.815, ("cora", "gat"): 0.830, ("citeseer", "gcn"): 0.703,
             ("citeseer", "gat"): 0.725}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--datasets", type=pathlib.Path,
                   default=pathlib.Path(os.environ.get("SLUICE_DATASETS", ROOT.parent / "shared/datasets")))
    p.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    p.add_argument("--only", help="one dataset (cora or citeseer)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("cora", "citeseer"):
            if args.only and name != args.only:
                continue
            ds = pathlib.Path(tmp) / name
            subprocess.run([sys.executable, str(ROOT / "scripts/sluice_prep.py"), "planetoid",
                            str(args.datasets / name), "--dataset", name, "--partitions", "1", "--out", str(ds)],
                           check=True, capture_output=True)
            for model in ("gcn", "graphsage", "gat"):
                accs, f1s, epochs = [], [], []
                for seed in range(1, args.seeds + 1):
                    run_dir = pathlib.Path(tmp) / f"{name}-{model}-{seed}"
                    subprocess.run([str(args.bin), "train", str(ROOT / f"configs/{name}_{model}.yaml"),
                                    "--set", f"dataset={ds}", "--set", f"run_dir={run_dir}",
                                    "--set", f"train.seed={seed}", "--set", "progress=false"],
                                   check=True, capture_output=True)
                    out = subprocess.run([str(args.bin), "eval", str(run_dir), "--split", "test"],
                                         check=True, capture_output=True, text=True).stdout
                    m = re.search(r"accuracy ([0-9.]+) macro-F1 ([0-9.]+).*checkpoint epoch-([0-9]+)", out)
                    accs.append(float(m.group(1)))
                    f1s.append(float(m.group(2)))
                    epochs.append(int(m.group(3)))
                    print(f"{name} {model} seed {seed}: test accuracy {accs[-1]:.4f} macro-F1 {f1s[-1]:.4f} "
                          f"(best validation epoch {epochs[-1]})", file=sys.stderr)
                rows.append((name, model, accs, f1s))
    print("\n| dataset | model | test accuracy per seed | mean | std | lowest | bar | published | macro-F1 mean |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    ok = True
    for name, model, accs, f1s in rows:
        mean, sd = statistics.mean(accs), statistics.stdev(accs) if len(accs) > 1 else 0.0
        bar = BARS[name][model]
        ok &= mean >= bar and min(accs) >= bar - 0.02
        pub = PUBLISHED.get((name, model))
        print(f"| {name} | {model} | {', '.join(f'{a:.3f}' for a in accs)} | {mean:.4f} | {sd:.4f} | "
              f"{min(accs):.3f} | {bar:.2f} | {pub if pub else '-'} | {statistics.mean(f1s):.4f} |")
    print("\nevery mean at its bar and every seed within 0.02 of it: " + ("yes" if ok else "NO"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
