#!/usr/bin/env python3
"""The soak (outside CI; scripts/test.sh --full runs it): each workload trains out of core on a
generated dataset for at least 30 epochs (or --minutes), its resident set sampled every second
from /proc (kept in WORK/rss-<workload>.tsv). Passes when the RSS at the end of every epoch from the third on is at most 1.02x its
value at the end of the third (metrics.jsonl's rss_bytes) and the peak stays under the budget.

    soak.py [--sluice build/release/train/sluice] [--epochs 30] [--minutes 0] [--workloads lp,rec,nc]
            [--work /tmp/sluice-soak] [--budget 1GiB]

Prints one table; exits 1 when a workload fails either criterion."""
import argparse
import json
import pathlib
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/e2e"))
from workloads import WORKLOADS, make_dataset, write_config  # noqa: E402

GROWTH = 1.02
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_bytes(text: str) -> int:
    for unit, scale in UNITS.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * scale)
    return int(text)


def rss_of(pid: int) -> int:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def soak(args, workload: str) -> dict:
    ds = make_dataset(workload, args.work / "data", "soak")
    run_dir = args.work / f"run-{workload}"
    cfg = write_config(workload, args.work / f"{workload}.yaml", ds, run_dir, args.epochs)
    cmd = [str(args.sluice), "train", str(cfg), "--overwrite", "--set", f"storage.budget={args.budget}"]
    if args.minutes:
        cmd += ["--set", f"train.max_minutes={args.minutes}"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, int]] = []

    def sample() -> None:
        while proc.poll() is None:
            samples.append((time.monotonic() - start, rss_of(proc.pid)))
            time.sleep(1.0)

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, err = proc.communicate()
    sampler.join()
    if proc.returncode != 0:
        return {"workload": workload, "error": err.strip().splitlines()[-1] if err.strip() else proc.returncode}
    # Every sample, for a look at where in an epoch the resident set grows.
    (args.work / f"rss-{workload}.tsv").write_text("".join(f"{s:.1f}\t{r}\n" for s, r in samples))
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rss = [e["rss_bytes"] for e in epochs]
    base = rss[2] if len(rss) >= 3 else 0
    worst = max(rss[2:]) / base if base else float("nan")
    peak = max(r for _, r in samples) if samples else 0
    summary = json.loads((run_dir / "summary.json").read_text())
    peak = max(peak, summary.get("peak_rss_bytes", 0))
    budget = parse_bytes(args.budget)
    ok = len(rss) >= 3 and worst <= GROWTH and peak <= budget
    return {"workload": workload, "epochs": len(rss), "minutes": (time.monotonic() - start) / 60,
            "samples": len(samples), "rss3": base, "last": rss[-1], "worst": worst, "peak": peak,
            "budget": budget, "ok": ok}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sluice", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--minutes", type=float, default=0, help="stop a workload after this long (0: epochs only)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/sluice-soak"))
    p.add_argument("--budget", default="1GiB", help="storage.budget of every workload (the peak must stay under)")
    args = p.parse_args()
    if not args.sluice.exists():
        print(f"soak: no sluice binary at {args.sluice} (build first)", file=sys.stderr)
        return 2
    mib = lambda b: f"{b / (1 << 20):.1f}"  # noqa: E731
    print(f"| workload | epochs | minutes | RSS samples | RSS epoch 3 (MiB) | RSS last (MiB) | "
          f"max epoch>=3 / epoch 3 | peak (MiB) | budget (MiB) | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    failed = False
    for w in args.workloads.split(","):
        r = soak(args, w)
        if "error" in r:
            print(f"| {w} | failed: {r['error']} |||||||||")
            failed = True
            continue
        failed |= not r["ok"]
        print(f"| {w} | {r['epochs']} | {r['minutes']:.1f} | {r['samples']} | {mib(r['rss3'])} | {mib(r['last'])} | "
              f"{r['worst']:.4f} | {mib(r['peak'])} | {mib(r['budget'])} | {'pass' if r['ok'] else 'FAIL'} |",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
