#!/usr/bin/env python3
"""Node classification with features far beyond memory, one table from one run.

Trains configs/nc_scale.yaml (or --config) on a generated dataset in several configurations,
interleaved over --rounds rounds, each run writing RUN/steps.tsv (wall seconds per step):

  in memory          every feature row in RAM (storage.mode: in_memory)
  chosen             out of core: the design docs/node_classification.md argues for (static
                     planner, the feature file swept every 32 steps into per-step packs)
  grouped            out of core: the previous design (oracle, io in groups of 2 steps, 16 KiB gaps)
  oracle, lru, static, none
                     out of core, one planner each, every step's misses read on their own
  mmap normal/random the same training reading features through a read-only mapping of the
                     dataset file and the page cache (madvise normal / random), in a cgroup-v1
                     memory group limited to the budget, as users of np.memmap train today

Per configuration: the median step time over steps 20 (--skip) to the end of epoch 2 (epoch 1,
which warms the cache, reported separately: its median over steps 20 on); rows loaded, disk requests
MB read and written (spill packs) per step; io busy per step; peak RSS against the budget. --short-steps runs the
slow baselines (the per-step planners, none, mmap) once for that many steps; their medians are
over steps 20 on of epoch 1.

Then the exactness check: test accuracy after --accuracy-epochs epochs out of core (chosen) and
in memory (equal, or the script fails), and a logistic regression on the features alone (the
planted classes must need the neighbourhood).

  sudo /usr/bin/python3 bench/nc_bench.py --dataset data/nc-scale [--rounds 3]
      [--configs in_memory,chosen,oracle,lru,static,none,mmap_normal,mmap_random]
      [--baseline-bin OTHER/sluice]

Beside the medians, the whole of epoch 2 (its first step, where a pass that starts with a sweep
of the whole file waits, included). --baseline-bin adds `chosen_baseline`: the chosen
configuration trained by another build (e.g. the commit before a change), in the same rounds.

Needs root for the cgroup and for dropping the page cache between runs (without it the mmap
rows run without a limit and say so).
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
CGROUP = pathlib.Path("/sys/fs/cgroup/memory/sluice-nc-bench")

# name -> (--set overrides, short run: --short-steps steps of epoch 1, one round)
CONFIGS = {
    "in_memory": (["storage.mode=in_memory"], False),
    "chosen": ([], False),
    "chosen_baseline": ([], False),  # --baseline-bin's build
    "grouped": (["storage.planner=oracle", "storage.window=4", "storage.spill_steps=0", "storage.io_group=2"], False),
    "oracle": (["storage.planner=oracle", "storage.spill_steps=0", "storage.io_group=1", "storage.io_group_gap=0"], True),
    "lru": (["storage.planner=lru", "storage.spill_steps=0", "storage.io_group=1", "storage.io_group_gap=0"], True),
    "static": (["storage.planner=static", "storage.spill_steps=0", "storage.io_group=1", "storage.io_group_gap=0"], True),
    "none": (["storage.planner=none", "storage.spill_steps=0", "storage.io_group=1", "storage.io_group_gap=0"], True),
    "mmap_normal": (["storage.mode=in_memory", "storage.mmap=normal"], True),
    "mmap_random": (["storage.mode=in_memory", "storage.mmap=random"], True),
}
MMAP = ("mmap_normal", "mmap_random")


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]i?B?)?\s*", text)
    if not m:
        raise ValueError(f"not a size: {text}")
    unit = (m.group(2) or "").rstrip("B")
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(float(m.group(1)) * scale[unit])


def drop_caches() -> None:
    try:
        subprocess.run(["sync"], check=True)
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def cgroup_prefix(limit: int) -> list[str]:
    """A command prefix that runs the program in a memory cgroup limited to `limit` bytes."""
    try:
        CGROUP.mkdir(exist_ok=True)
        (CGROUP / "memory.limit_in_bytes").write_text(str(limit))
    except OSError as e:
        print(f"nc_bench: no cgroup-v1 memory limit ({e}); mmap runs unlimited", file=sys.stderr)
        return []
    return ["sh", "-c", f'echo $$ > {CGROUP}/cgroup.procs && exec "$@"', "sh"]


def train(args, name: str, run_dir: pathlib.Path, epochs: int, extra: list[str]) -> dict:
    sets, short = CONFIGS[name]
    binary = args.baseline_bin if name == "chosen_baseline" else args.bin
    cmd = [str(binary), "train", str(args.config), "--overwrite", "--set", f"dataset={args.dataset}",
           "--set", f"run_dir={run_dir}", "--set", "progress=false", "--set", "step_log=true",
           "--set", f"train.epochs={epochs}", "--set", f"storage.budget={args.budget}"]
    for s in sets + extra:
        cmd += ["--set", s]
    env = dict(os.environ)
    if short and args.short_steps > 0:
        env["SLUICE_STOP_AFTER_STEPS"] = str(args.short_steps)
    prefix = cgroup_prefix(parse_bytes(args.budget)) if name in MMAP else []
    drop_caches()
    out = subprocess.run(prefix + cmd, capture_output=True, text=True, env=env)
    if out.returncode not in (0, 130, 143):
        sys.exit(f"nc_bench: {name}: {' '.join(cmd)} failed:\n{out.stderr.strip()[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [line.split("\t") for line in (run_dir / "steps.tsv").read_text().splitlines()[1:]]
    return {"steps": [(int(e), int(s), float(sec)) for e, s, sec, *_ in steps], "summary": summary}


SKIP = 20  # steps of an epoch left out of its median (--skip)


def median_steps(steps, epoch: int, stat=statistics.median):
    xs = [sec for e, s, sec in steps if e == epoch and s >= SKIP]
    return stat(xs) if xs else float("nan")


def epoch2(run, stat=statistics.median):
    """Steps SKIP on of epoch 2, or of epoch 1 for a run that stopped in it."""
    last = 2 if any(e == 2 for e, _, _ in run["steps"]) else 1
    return median_steps(run["steps"], last, stat=stat)


def whole_epoch(run, epoch: int = 2) -> tuple[float, float]:
    """The seconds of an epoch's steps and of its first step (nan when the run has none)."""
    xs = [(s, sec) for e, s, sec in run["steps"] if e == epoch]
    if not xs:
        return float("nan"), float("nan")
    return sum(sec for _, sec in xs), min(xs)[1]


def logistic_regression(dataset: pathlib.Path, iters: int = 300) -> float:
    """Test accuracy of a softmax regression on the features alone (full-batch Adam)."""
    m = json.loads((dataset / "manifest.json").read_text())
    f = m["files"]["nodes.features"]
    x = np.memmap(dataset / f["path"], dtype=f["dtype"], mode="r").reshape(f["shape"])
    load = lambda role: np.fromfile(dataset / m["files"][role]["path"], dtype=m["files"][role]["dtype"])  # noqa: E731
    y = load("nodes.labels")
    tr, te = np.sort(load("nodes.train")), np.sort(load("nodes.test"))
    xtr, xte = np.asarray(x[tr], np.float32), np.asarray(x[te], np.float32)
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-6
    xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    c = int(m["counts"]["classes"])
    w, b = np.zeros((x.shape[1], c), np.float32), np.zeros(c, np.float32)
    mw, vw, mb, vb = [np.zeros_like(w), np.zeros_like(w), np.zeros_like(b), np.zeros_like(b)]
    onehot = np.eye(c, dtype=np.float32)[y[tr]]
    for t in range(1, iters + 1):
        z = xtr @ w + b
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        g = (p - onehot) / len(tr)
        gw, gb = xtr.T @ g + 1e-4 * w, g.sum(0)
        for param, grad, m1, m2 in ((w, gw, mw, vw), (b, gb, mb, vb)):
            m1 *= 0.9
            m1 += 0.1 * grad
            m2 *= 0.999
            m2 += 0.001 * grad * grad
            param -= 0.05 * (m1 / (1 - 0.9**t)) / (np.sqrt(m2 / (1 - 0.999**t)) + 1e-8)
    return float(((xte @ w + b).argmax(1) == y[te]).mean())


def test_accuracy(args, run_dir: pathlib.Path) -> tuple[float, str]:
    out = subprocess.run([str(args.bin), "eval", str(run_dir), "--split", "test", "--checkpoint", "latest"],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"accuracy ([0-9.]+)", out)
    return float(m.group(1)), out.strip().splitlines()[-1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=pathlib.Path, required=True, help="the gen-nc scale dataset")
    p.add_argument("--config", type=pathlib.Path, default=ROOT / "configs/nc_scale.yaml")
    p.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/release/train/sluice")
    p.add_argument("--budget", default="3GiB", help="memory budget (and the mmap runs' cgroup limit)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (0: the accuracy check alone)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per timed run")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    p.add_argument("--short-steps", type=int, default=40,
                   help="steps the slow baselines (per-step planners, none, mmap) run, once (0: all, every round)")
    p.add_argument("--skip", type=int, default=20,
                   help="steps at the start of an epoch left out of its median (the slow mmap rows: fewer)")
    p.add_argument("--accuracy-epochs", type=int, default=3, help="0: skip the accuracy check")
    p.add_argument("--work", type=pathlib.Path, help="run directories (default: a temporary one)")
    p.add_argument("--baseline-bin", type=pathlib.Path,
                   help="another build of sluice: adds chosen_baseline, the chosen configuration trained by it")
    args = p.parse_args()
    global SKIP
    SKIP = args.skip
    if 0 < args.short_steps <= SKIP:
        p.error(f"--short-steps {args.short_steps} leaves no step after --skip {SKIP}")
    args.dataset = args.dataset.resolve()
    names = [n for n in args.configs.split(",") if n]
    if args.baseline_bin is not None and "chosen_baseline" not in names:
        names.append("chosen_baseline")
    if "chosen_baseline" in names and args.baseline_bin is None:
        p.error("chosen_baseline needs --baseline-bin")
    for n in names:
        if n not in CONFIGS:
            p.error(f"unknown configuration {n} (expected {', '.join(CONFIGS)})")
    work = args.work or pathlib.Path(tempfile.mkdtemp(prefix="nc-bench-", dir=ROOT / "runs" if (ROOT / "runs").exists() else None))
    results = {n: [] for n in names}
    for r in range(args.rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            if CONFIGS[n][1] and r > 0 and args.short_steps > 0:
                continue  # the short baselines run once
            res = train(args, n, work / f"{n}-{r}", args.epochs, [])
            results[n].append(res)
            e2 = median_steps(res["steps"], 2)
            whole, first = whole_epoch(res)
            print(f"round {r + 1}: {n}: epoch 1 {median_steps(res['steps'], 1):.3f} s/step, "
                  f"epoch 2 {e2:.3f} s/step, {whole:.1f} s in all, its first step {first:.2f} s", file=sys.stderr)
            if r + 1 < args.rounds:
                shutil.rmtree(work / f"{n}-{r}", ignore_errors=True)
    budget = parse_bytes(args.budget)
    if args.rounds == 0:
        names = []  # --rounds 0: the accuracy check alone
    else:
        print(f"\nnode classification out of core: {args.dataset.name}, budget {args.budget}, medians of "
              f"{args.rounds} interleaved rounds (step seconds: median over steps {SKIP} to the end of epoch 2; "
              f"short runs: steps {SKIP} to {args.short_steps} of epoch 1)\n")
        print("| configuration | step s (epoch 2) | mean step s (epoch 2) | step s (epoch 1) | vs in memory | "
              "epoch 2 s | its first step s | epoch 2 vs in memory | "
              "rows loaded / step | requests / step | MB read / step | MB written / step | io busy s / step | peak RSS | "
              "RSS / budget |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    mem = None
    table = {}
    for n in names:
        rounds = results[n]
        e2 = statistics.median(epoch2(x) for x in rounds)
        e2_mean = statistics.median(epoch2(x, statistics.mean) for x in rounds)
        e1 = statistics.median(median_steps(x["steps"], 1) for x in rounds)
        s = rounds[-1]["summary"]
        steps = max(1, len(rounds[-1]["steps"]))
        loaded = s.get("cache", {}).get("rows_loaded", 0) / steps
        req = s.get("io", {}).get("requests", 0) / steps
        written = s.get("spill", {}).get("bytes_written", 0) / steps / 1e6
        mb = s.get("io", {}).get("bytes", 0) / steps / 1e6 - written
        io = s.get("pipeline", {}).get("io_busy_s", 0) / steps
        rss = statistics.median(x["summary"].get("peak_rss_bytes", float("nan")) for x in rounds)
        whole = statistics.median(whole_epoch(x)[0] for x in rounds)
        first = statistics.median(whole_epoch(x)[1] for x in rounds)
        table[n] = {"e2": e2, "mean": e2_mean, "io": io, "whole": whole}
        if n == "in_memory":
            mem = e2
        vs = f"{e2 / mem:.2f}" if mem else "-"
        vs_whole = f"{whole / table['in_memory']['whole']:.2f}" if mem else "-"
        print(f"| {n} | {e2:.3f} | {e2_mean:.3f} | {e1:.3f} | {vs} | {whole:.1f} | {first:.2f} | {vs_whole} | "
              f"{loaded:,.0f} | {req:,.0f} | {mb:,.1f} | "
              f"{written:,.1f} | {io:.3f} | {rss / 2**30:.2f} GiB | {rss / budget:.2f} |")
    if mem and "chosen" in table:
        c = table["chosen"]
        bound = 1.1 * max(mem, c["io"])
        mem_mean = table["in_memory"]["mean"]
        print(f"\nchosen / in memory: {c['e2'] / mem:.2f} in medians, {c['mean'] / mem_mean:.2f} in means "
              f"(GraphBolt: 3.4x at 19% cached, 1.13x at 47%); overlap: {c['e2']:.3f} s against "
              f"1.1 x max(in memory, io busy) = {bound:.3f} s; the whole of epoch 2 "
              f"{c['whole'] / table['in_memory']['whole']:.2f}x")
        mm = [table[n]["e2"] for n in MMAP if n in table]
        if mm:
            print(f"mmap (the faster madvise) / chosen: {min(mm) / c['e2']:.2f}x")
    if args.accuracy_epochs > 0 and ("chosen" in names or args.rounds == 0):
        acc = {}
        for n in ("chosen", "in_memory"):
            run_dir = work / f"{n}-accuracy"
            train(args, n, run_dir, args.accuracy_epochs, [])
            acc[n] = test_accuracy(args, run_dir)
        lr = logistic_regression(args.dataset)
        print(f"\ntest accuracy after {args.accuracy_epochs} epochs: out of core {acc['chosen'][0]:.4f}, in memory "
              f"{acc['in_memory'][0]:.4f} ({'equal' if acc['chosen'][1] == acc['in_memory'][1] else 'DIFFERENT'}); "
              f"logistic regression on the features alone {lr:.4f}")
        if acc["chosen"][1] != acc["in_memory"][1]:
            sys.exit("nc_bench: out of core and in memory evaluate differently:\n  " + acc["chosen"][1] +
                     "\n  " + acc["in_memory"][1])
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
