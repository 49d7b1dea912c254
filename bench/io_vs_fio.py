#!/usr/bin/env python3
"""Like-for-like: sluice's io layer against fio, in one run, on one file.

Random 4 KiB reads with O_DIRECT over a file of at least 8 GiB: sluice's RowFile (4096-byte
rows, merging off, one io_uring ring at queue depth 32) against fio (ioengine=io_uring,
numjobs=1, iodepth=32, rw=randread, bs=4k), alternating, --rounds times each. Then the pread
backend with 1, 2 and 4 threads, and what merging neighbouring rows gains for random row sets
of 1% and 10% of a partition of 128-byte rows. Prints a markdown table of medians.

  /usr/bin/python3 bench/io_vs_fio.py [--file PATH] [--size-gib 8] [--rounds 5] [--seconds 10]
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def sh(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def ensure_file(path: pathlib.Path, size_gib: int) -> None:
    want = size_gib << 30
    if path.exists() and path.stat().st_size == want:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"writing {size_gib} GiB test file {path} with fio ...", file=sys.stderr)
    tmp = path.with_suffix(".tmp")
    sh(["fio", "--name=layout", f"--filename={tmp}", f"--size={size_gib}G", "--rw=write",
        "--bs=1M", "--direct=1", "--ioengine=io_uring", "--iodepth=8", "--output-format=json"])
    tmp.rename(path)


def fio_randread(path: pathlib.Path, seconds: int) -> float:
    out = sh(["fio", "--name=randread", f"--filename={path}", "--rw=randread", "--bs=4k",
              "--direct=1", "--ioengine=io_uring", "--iodepth=32", "--numjobs=1",
              "--time_based", f"--runtime={seconds}", "--norandommap", "--randrepeat=0",
              "--output-format=json"])
    return float(json.loads(out)["jobs"][0]["read"]["iops"])


def io_bench(binary: pathlib.Path, *args: str) -> list[dict]:
    return [json.loads(line) for line in sh([str(binary), *args]).splitlines() if line.strip()]


def main() -> int:
    if shutil.which("fio") is None:
        sys.exit("io_vs_fio: fio is not installed (apt-get install fio)")
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=pathlib.Path, default=ROOT / "build/bench-io/randread.bin",
                        help="test file (created with fio if missing or of another size)")
    parser.add_argument("--size-gib", type=int, default=8, help="test file size in GiB (>= 8)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating runs of each")
    parser.add_argument("--seconds", type=int, default=10, help="length of each run")
    parser.add_argument("--bench", type=pathlib.Path, default=ROOT / "build/release/bench/io_bench",
                        help="the io_bench binary")
    parser.add_argument("--skip-pread", action="store_true", help="only fio vs io_uring")
    parser.add_argument("--skip-merge", action="store_true", help="skip the merging table")
    args = parser.parse_args()

    ensure_file(args.file, args.size_gib)
    f = str(args.file)
    s = str(args.seconds)
    runs: dict[str, list[float]] = {"fio io_uring qd32": [], "sluice io_uring qd32": []}
    for t in (1, 2, 4):
        runs[f"sluice pread {t} thread(s)"] = []
    def sluice_uring() -> None:
        res = io_bench(args.bench, "rand", "--file", f, "--backend", "uring", "--qd", "32",
                       "--seconds", s)
        runs["sluice io_uring qd32"].append(res[0]["iops"])

    def fio() -> None:
        runs["fio io_uring qd32"].append(fio_randread(args.file, args.seconds))

    for r in range(args.rounds):
        # Alternate which goes first: the disk's throughput drifts, and a fixed order would
        # hand one side the drift.
        for run in ((fio, sluice_uring) if r % 2 == 0 else (sluice_uring, fio)):
            run()
        if args.skip_pread:
            continue
        for t in (1, 2, 4):
            res = io_bench(args.bench, "rand", "--file", f, "--backend", "pread", "--qd", "1",
                           "--threads", str(t), "--seconds", s)
            runs[f"sluice pread {t} thread(s)"].append(res[0]["iops"])
        print(f"round {r + 1}/{args.rounds}: " +
              ", ".join(f"{k} {v[-1]:.0f}" for k, v in runs.items()), file=sys.stderr)

    fio_median = statistics.median(runs["fio io_uring qd32"])
    print(f"\nRandom 4 KiB reads, O_DIRECT, {args.size_gib} GiB file, {args.rounds} alternating "
          f"runs of {args.seconds} s each (medians)\n")
    print("| configuration | IOPS (median) | MB/s | min..max IOPS | vs fio |")
    print("|---|---:|---:|---:|---:|")
    for name, values in runs.items():
        if not values:
            continue
        m = statistics.median(values)
        print(f"| {name} | {m:,.0f} | {m * 4096 / 1e6:,.1f} | {min(values):,.0f}..{max(values):,.0f}"
              f" | {m / fio_median:.2f} |")
    ratios = [a / b for a, b in zip(runs["sluice io_uring qd32"], runs["fio io_uring qd32"])]
    print(f"\nmedian of per-round ratios sluice/fio: {statistics.median(ratios):.3f}")

    if args.skip_merge:
        return 0
    print("\nMerging neighbouring rows: random row sets inside one partition of 1M rows x 128 B "
          "(128 MB), io_uring qd32, 5 sets each\n")
    print("| density | variant | rows/s | requests per set | MB read per set |")
    print("|---:|---|---:|---:|---:|")
    for density in ("0.01", "0.1"):
        for row in io_bench(args.bench, "merge", "--file", f, "--row-bytes", "128",
                            "--partition-rows", "1000000", "--density", density):
            print(f"| {float(density):.0%} | {row['variant']} | {row['rows_per_s']:,.0f} | "
                  f"{row['requests_per_set']:,.0f} | {row['mb_read_per_set']:,.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
