#!/usr/bin/env python3
"""Does a change cost speed? Alternates two checkouts' benchmarks (A B, B A, A B, ...) and reports
each pair's ratio and the median ratio per configuration (> 1: the new checkout is slower).

Each checkout runs its own bench/ scripts with its own binary (build/release/train/sluice), so
a change to the scripts themselves is compared too. The benchmarks are the ones the training
core issues name:

  lp:      bench/lp_bench.py --fb15k DATA --rounds 1            (FB15k-237, epoch seconds)
  lp20m:   bench/lp_bench.py --g20m DATA --rounds 1             (20M edges, epoch seconds)
  dlrm:    bench/dlrm_bench.py --planted DATA --budget 1GiB --steps 300 --rounds 1 --configs oracle
           (samples/s)
  torch:   bench/dlrm_bench.py --torch DATA --steps 150 --rounds 1   (samples/s)
  sampler: bench/sampler_vs_numpy.py                             (k-hop samples/s)

  /usr/bin/python3 bench/ab_compare.py --base ../base --new . --pairs 5 \\
      --fb15k data/fb15k-237 --planted data/clicks-planted

A pass, by the issues' protocol: every median ratio <= 1.05 (and 5 more pairs when the pairs
spread beyond +-10%).
"""
import argparse
import pathlib
import re
import statistics
import subprocess
import sys

PY = sys.executable


def table_rows(text: str) -> dict:
    """The first two cells of every markdown table row: name -> number."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.fullmatch(r"[0-9][0-9,]*(\.[0-9]+)?", cells[1]):
            rows[cells[0]] = float(cells[1].replace(",", ""))
    return rows


def bench_commands(args) -> list:
    """(name, script arguments, higher is better)"""
    out = []
    if args.fb15k:
        out.append(("lp", ["bench/lp_bench.py", "--fb15k", str(args.fb15k), "--rounds", "1",
                           "--epochs", str(args.lp_epochs)], False))
    if args.g20m:
        out.append(("lp20m", ["bench/lp_bench.py", "--g20m", str(args.g20m), "--rounds", "1"], False))
    if args.planted:
        out.append(("dlrm", ["bench/dlrm_bench.py", "--planted", str(args.planted), "--budget", "1GiB",
                             "--steps", "300", "--rounds", "1", "--configs", "oracle"], True))
    if args.torch:
        out.append(("torch", ["bench/dlrm_bench.py", "--torch", str(args.torch), "--steps", "150",
                              "--rounds", "1"], True))
    if args.sampler:
        out.append(("sampler", ["bench/sampler_vs_numpy.py"], True))
    return out


def run_one(checkout: pathlib.Path, script_args: list, scripts: pathlib.Path) -> dict:
    binary = checkout / "build/release/train/sluice"
    args = [PY, str(scripts / script_args[0]), *script_args[1:]]
    if "sampler_vs_numpy" not in script_args[0]:
        args += ["--bin", str(binary)]
    out = subprocess.run(args, capture_output=True, text=True, cwd=checkout)
    if out.returncode != 0:
        sys.exit(f"ab_compare: {' '.join(args)} failed: {out.stderr.strip()[-2000:]}")
    return table_rows(out.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=pathlib.Path, required=True, help="the checkout before the change (A)")
    p.add_argument("--new", type=pathlib.Path, required=True, help="the checkout with the change (B)")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--fb15k", type=pathlib.Path)
    p.add_argument("--g20m", type=pathlib.Path)
    p.add_argument("--planted", type=pathlib.Path)
    p.add_argument("--torch", type=pathlib.Path)
    p.add_argument("--sampler", action="store_true", help="also bench/sampler_vs_numpy.py")
    p.add_argument("--scripts", choices=["own", "new"], default="own",
                   help="own: each checkout runs its own bench scripts; new: both run the new ones")
    p.add_argument("--lp-epochs", type=int, default=2,
                   help="lp_bench --epochs (a round's time is the median epoch after the first)")
    args = p.parse_args()
    for name in ("fb15k", "g20m", "planted", "torch"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    benches = bench_commands(args)
    if not benches:
        p.error("give at least one of --fb15k, --g20m, --planted, --torch, --sampler")
    ratios = {}  # (bench, configuration) -> per-pair ratios (new cost / base cost)
    for pair in range(args.pairs):
        for bench, script, higher_better in benches:
            base, new = args.base.resolve(), args.new.resolve()
            shared = args.scripts == "new" and bench != "sampler"  # (its C++ bench is per checkout)
            # A B in odd pairs, B A in even ones: whatever the first run leaves behind (dirty
            # pages, a warm cache, heat) falls on both alike.
            if pair % 2 == 0:
                a = run_one(base, script, new if shared else base)
                b = run_one(new, script, new)
            else:
                b = run_one(new, script, new)
                a = run_one(base, script, new if shared else base)
            for config in sorted(set(a) & set(b)):
                r = a[config] / b[config] if higher_better else b[config] / a[config]
                ratios.setdefault((bench, config), []).append(r)
                print(f"pair {pair + 1}: {bench}: {config}: base {a[config]:,.3f} new {b[config]:,.3f} "
                      f"ratio {r:.3f}", file=sys.stderr, flush=True)
    print(f"\nnew / base cost per configuration ({args.pairs} alternating pairs; > 1: new is slower)\n")
    print("| benchmark | configuration | ratio per pair | median |\n|---|---|---|---:|")
    for (bench, config), rs in ratios.items():
        print(f"| {bench} | {config} | {', '.join(f'{r:.3f}' for r in rs)} | {statistics.median(rs):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
