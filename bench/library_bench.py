#!/usr/bin/env python3
"""A user's model through the public API against sluice's built-in one, measured in the same run.

  speed    examples/dlrm_custom --model dot (the DLRM interaction re-implemented outside the
           engine) against `sluice train` on the planted click log: row file, oracle planner,
           --budget, --steps steps from fresh tables; --pairs alternating pairs (A B, B A, ...),
           samples/s of each and the per-pair ratio built-in / example (> 1: the example is slower).
  quality  one epoch of each (--quality): test AUC of the built-in model, of the re-implemented
           one and of the DCN-v2 variant (--model dcn).

  /usr/bin/python3 bench/library_bench.py --planted data/clicks-planted \
      --example /tmp/ex/build/dlrm_custom [--pairs 5] [--steps 300] [--quality]

Build the example against an installed prefix first (docs/library.md):
  cmake --install build/release --prefix /tmp/sluice && cp -r examples/dlrm_custom /tmp/ex &&
  cmake -S /tmp/ex -B /tmp/ex/build -G Ninja -DCMAKE_PREFIX_PATH=/tmp/sluice && cmake --build /tmp/ex/build
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs/clicks_planted.yaml"


def last_rate(run_dir: pathlib.Path) -> float:
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows[-1]["samples_per_s"]


def check(out: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if out.returncode != 0:
        sys.exit(f"library_bench: {what} failed: {out.stderr.strip()}")
    return out


def speed(args, tmp: pathlib.Path, base: list[str]) -> None:
    sets = base + [f"train.max_steps={args.steps}", "eval.every=0", "checkpoint_every=0"]
    flags = [x for s in sets for x in ("--set", s)]
    rates = {"built-in": [], "example": []}
    for p in range(args.pairs):
        order = ["built-in", "example"] if p % 2 == 0 else ["example", "built-in"]
        for who in order:
            run_dir = tmp / f"{who}-{p}"
            cmd = ([str(args.bin), "train", str(CONFIG)] if who == "built-in" else
                   [str(args.example), "--model", "dot", "--train-only", str(CONFIG)])
            check(subprocess.run(cmd + flags + ["--set", f"run_dir={run_dir}", "--set", "progress=false"],
                                 capture_output=True, text=True), who)
            rates[who].append(last_rate(run_dir))
            subprocess.run(["rm", "-rf", str(run_dir)])
        print(f"pair {p + 1}: built-in {rates['built-in'][-1]:,.0f} example {rates['example'][-1]:,.0f} samples/s",
              file=sys.stderr)
    ratios = [b / e for b, e in zip(rates["built-in"], rates["example"])]
    print(f"\nDLRM on {args.planted}, row file + oracle, budget {args.budget}, {args.steps} steps; "
          f"{args.pairs} alternating pairs\n")
    print("| model | samples/s per run | median |\n|---|---|---:|")
    for who, r in rates.items():
        print(f"| {who} | {', '.join(f'{x:,.0f}' for x in r)} | {statistics.median(r):,.0f} |")
    print(f"\nbuilt-in / example per pair: {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"median {statistics.median(ratios):.3f} (> 1: the example is slower)")


def quality(args, tmp: pathlib.Path, base: list[str]) -> None:
    flags = [x for s in base + ["eval.every=1"] for x in ("--set", s)]
    auc = {}
    run_dir = tmp / "q-builtin"
    check(subprocess.run([str(args.bin), "train", str(CONFIG), *flags, "--set", f"run_dir={run_dir}",
                          "--set", "progress=false"], capture_output=True, text=True), "built-in")
    out = check(subprocess.run([str(args.bin), "eval", str(run_dir), "--split", "test"], capture_output=True,
                               text=True), "built-in eval")
    auc["built-in"] = out.stdout.split()[2]
    for model in ("dot", "dcn"):
        out = check(subprocess.run([str(args.example), "--model", model, str(CONFIG), *flags,
                                    "--set", f"run_dir={tmp / ('q-' + model)}", "--set", "progress=false"],
                                   capture_output=True, text=True), model)
        auc[f"example {model}"] = out.stdout.strip().splitlines()[-1].split()[2]
    print(f"\nOne epoch on {args.planted}, test AUC (best checkpoint)\n")
    print("| model | test AUC |\n|---|---:|")
    for k, v in auc.items():
        print(f"| {k} | {v} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--planted", type=pathlib.Path, required=True)
    p.add_argument("--example", type=pathlib.Path, required=True, help="the built examples/dlrm_custom")
    p.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--budget", default="1GiB")
    p.add_argument("--quality", action="store_true")
    args = p.parse_args()
    manifest = json.loads((args.planted / "manifest.json").read_text())
    rows = manifest["stats"].get("vocab_per_feature", 1_000_000)
    base = [f"dataset={args.planted.resolve()}", f"storage.budget={args.budget}", f"model.table_rows={rows}",
            "storage.backend=rowfile", "storage.planner=oracle"]
    with tempfile.TemporaryDirectory(dir=ROOT / "data") as tmp:
        speed(args, pathlib.Path(tmp), base)
        if args.quality:
            quality(args, pathlib.Path(tmp), base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
