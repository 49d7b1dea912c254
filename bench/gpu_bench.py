#!/usr/bin/env python3
"""The device path on a GPU: configurations measured in one run on one machine, one table per
workload (scripts/gpu_check.sh bench runs it on the GPU machine).

  --dlrm DIR    a generated Zipf click log (gen-clicks, 8 tables, 13 dense features; ids modulo
                the table rows): at each --batches size, sluice on the GPU with the tables in host
                RAM (storage.mode in_memory) and out of core (tables --scale x (storage.budget +
                device.gpu_budget)), against bench/dlrm_reference.py on the same GPU with its
                tables in GPU memory and in host memory. Same model (dim 16, bottom 512-256,
                top 512-256), SGD everywhere. samples/s from the median step after --warmup steps
                (sluice: RUN/steps.tsv; the reference: its timed loop after 3 warm-up steps).
  --fb15k DIR   link prediction on FB15k-237 prepared by `sluice_prep.py kg ... --partitions 4`
                (configs/fb15k237_distmult_marius.yaml and _ooc.yaml): seconds per epoch on the GPU
                in memory and out of core and on the CPU, the median of the epochs after the first.
  --g20m DIR    link prediction on the 20M-edge generated graph of configs/marius_g20m.yaml
                (16 partitions, 4 resident): one epoch on the GPU out of core and in memory with
                the same schedule; step time, GPU busy, io and planner busy per step.
  --nc DIR      node classification on a gen-nc graph (3-layer GraphSage, hidden 256, fanouts
                15,10,5, --nc-batch seeds a step): on the GPU with the features in host RAM
                (gathered by the CPU into page-locked staging; the CPU sampler and the CUDA
                sampler), in GPU memory (device.gpu_budget holds them all) and out of core (the
                feature cache plus device.gpu_budget a quarter of the feature bytes); then
                bench/pyg_reference.py on the same GPU (same model, same fanouts and batch):
                epoch-time ratio and test accuracy.

Each sluice row also gives the summary's device figures: GPU busy over wall, copy seconds and
how many of them hid behind compute, and (out of core) io and planner busy per step, for the
overlap criterion: out-of-core step <= 1.1 x max(in-memory step, io per step, planner per step).

  python3 bench/gpu_bench.py --dlrm data/clicks8 --fb15k data/fb15k-237 [--bin build/gpu/train/sluice]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
GIB = 1 << 30


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def train(binary: pathlib.Path, config: str, run_dir: pathlib.Path, timeout: int,
          errors: list[str] | None = None) -> dict | None:
    """Trains one fresh run; its summary.json, steps.tsv and stdout, or None (the error is printed
    and appended to `errors`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.yaml"
    path.write_text(config.replace("RUN_DIR", str(run_dir)))
    start = time.perf_counter()
    try:
        out = subprocess.run([str(binary), "train", str(path)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"  {run_dir.name}: timed out after {timeout} s")
        return None
    if out.returncode != 0:
        log(f"  {run_dir.name}: failed: {out.stderr.strip()[-400:]}")
        if errors is not None:
            errors.append(out.stderr)
        return None
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [l.split("\t") for l in (run_dir / "steps.tsv").read_text().splitlines()[1:]]
    metrics = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    log(f"  {run_dir.name}: {time.perf_counter() - start:.1f} s; "
        + "; ".join(l for l in out.stdout.splitlines() if l.strip().startswith(("device:", "memory:", "sampler:", "compute thread:", "pipeline:"))))
    return {"summary": summary, "steps": steps, "metrics": metrics, "stdout": out.stdout}


def to_bytes(text: str) -> float:
    """'82.29 MiB' -> bytes (sluice's FormatBytes)."""
    value, unit = text.split()
    return float(value) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]


def step_seconds(run: dict, warmup: int) -> float:
    return statistics.median(float(s[2]) for s in run["steps"][warmup:])


def device_cells(run: dict, warmup: int) -> str:
    d = run["summary"].get("device", {})
    wall = max(d.get("wall_s", 0), 1e-9)
    return (f"{100 * d.get('busy_s', 0) / wall:.0f}% | {d.get('copy_s', 0):.2f} s | "
            f"{d.get('copy_hidden_s', 0):.2f} s | {run['summary'].get('peak_rss_bytes', 0) / GIB:.2f} GiB")


def overlap_cells(run: dict, mem_step: float, warmup: int) -> str:
    """io and planner busy per step, and the criterion's bound."""
    p = run["summary"].get("prefetcher", {})
    steps = max(1, len(run["steps"]))
    io, plan = p.get("io_s", 0) / steps, p.get("plan_s", 0) / steps
    bound = 1.1 * max(mem_step, io, plan)
    # The mean step, not the median: a median hides the steps that wait for a partition to load.
    step = statistics.fmean(float(s[2]) for s in run["steps"][warmup:])
    return f"{io * 1e3:.1f} ms | {plan * 1e3:.1f} ms | {step / bound:.2f}"


DLRM = """task: recommendation
dataset: {ds}
run_dir: RUN_DIR
progress: false
step_log: true
checkpoint_every: -1
model: {{dim: 16, bottom: [512, 256], top: [512, 256], ids: modulo, table_rows: {rows}, linear: false}}
train: {{epochs: 1, batch: {batch}, max_steps: {steps}, optimizer: sgd, lr: 0.1, dense_optimizer: sgd, dense_lr: 0.1}}
eval: {{every: 0}}
storage: {{mode: {mode}, budget: {budget}, window: 4, run_ahead: 2}}
device: {{type: {device}, gpu_budget: {gpu_budget}}}
"""


def reference(ds: pathlib.Path, rows: int, batch: int, steps: int, tables: str) -> dict | None:
    args = [PY, str(ROOT / "bench/dlrm_reference.py"), str(ds), "--rows", str(rows), "--dim", "16",
            "--batch", str(batch), "--steps", str(steps), "--lr", "0.1", "--threads", "16",
            "--device", "cuda", "--tables", tables]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        log(f"  reference ({tables}): failed: {out.stderr.strip()[-400:]}")
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    log(f"  reference ({tables}): {r}")
    return r


def bench_dlrm(args, tmp: pathlib.Path) -> None:
    budget, gpu = args.budget_gib * GIB, args.gpu_budget_gib * GIB
    manifest = json.loads((args.dlrm / "manifest.json").read_text())
    tables = manifest["record"]["sparse"]
    rows = int(args.scale * (budget + gpu) / (tables * 64))  # 16 floats a row, SGD: no state
    print(f"\n### DLRM on the GPU: {args.dlrm}, {tables} tables x {rows:,} rows x 64 B = "
          f"{tables * rows * 64 / GIB:.1f} GiB of tables, {args.scale:g} x (storage.budget {args.budget_gib:g} GiB + "
          f"device.gpu_budget {args.gpu_budget_gib:g} GiB); {args.steps} steps a run, median step after "
          f"{args.warmup}\n")
    print("| batch | system | samples/s | vs reference (tables on GPU) | GPU busy | copies | hidden | peak RSS | "
          "io/step | plan/step | mean step / 1.1 max(mem, io, plan) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for batch in args.batches:
        fmt = dict(ds=args.dlrm, rows=rows, batch=batch, steps=args.steps, budget=f"{args.budget_gib}GiB",
                   gpu_budget=f"{args.gpu_budget_gib}GiB", device=args.device)
        # sluice first: when a time-boxed call ends early, its rows are in the log already.
        mem = train(args.bin, DLRM.format(mode="in_memory", **fmt), tmp / f"dlrm-mem-{batch}", 900)
        ooc = train(args.bin, DLRM.format(mode="out_of_core", **fmt), tmp / f"dlrm-ooc-{batch}", 900)
        mem_step = step_seconds(mem, args.warmup) if mem else float("nan")
        for name, r in (("in memory", mem), ("out of core", ooc)):
            if r:
                log(f"  sluice {name}, batch {batch}: {batch / step_seconds(r, args.warmup):,.0f} samples/s; "
                    f"{device_cells(r, args.warmup)}" + (f" | {overlap_cells(r, mem_step, args.warmup)}" if r is ooc else ""))
        ref = {t: reference(args.dlrm, rows, batch, args.steps, t) for t in ("device", "host")}
        base = ref["device"]["compute_only_samples_per_s"] if ref["device"] else float("nan")
        for name, r in (("PyTorch, tables in GPU memory", ref["device"]), ("PyTorch, tables in host memory", ref["host"])):
            if r:
                print(f"| {batch} | {name} (compute only / end to end) | {r['compute_only_samples_per_s']:,} / "
                      f"{r['end_to_end_samples_per_s']:,} | {r['compute_only_samples_per_s'] / base:.2f} | | | | | | | |")
        for name, r in (("sluice GPU, tables in host RAM", mem), ("sluice GPU, out of core", ooc)):
            if r:
                rate = batch / step_seconds(r, args.warmup)
                over = overlap_cells(r, mem_step, args.warmup) if r is ooc else "| |"
                print(f"| {batch} | {name} | {rate:,.0f} | {rate / base:.2f} | {device_cells(r, args.warmup)} | {over} |")
        sys.stdout.flush()


def bench_fb15k(args, tmp: pathlib.Path) -> None:
    print(f"\n### Link prediction on FB15k-237 (DistMult d=50, batch 1000, 10 x 500 negatives): seconds per "
          f"epoch, median of epochs 2..{args.lp_epochs} (Marius reports 0.8-0.9 s on a V100); the GPU's out-of-core "
          f"run gets storage.budget 2 GiB (the config's 1 GiB less the CUDA runtime's host memory holds no cache), "
          f"the same 2 of 4 partitions resident\n")
    print("| configuration | epoch s | GPU busy | copies | hidden | peak RSS |\n|---|---:|---:|---:|---:|---:|")
    dev = [f"device: {{type: {args.device}}}"]
    runs = [("GPU, in memory", "fb15k237_distmult_marius.yaml", dev),
            ("GPU, out of core (2 of 4 partitions)", "fb15k237_distmult_marius_ooc.yaml", dev),
            ("CPU, in memory", "fb15k237_distmult_marius.yaml", [])]
    for name, config, extra in runs:
        text = (ROOT / "configs" / config).read_text()
        lines = [l for l in text.splitlines() if not l.startswith(("dataset:", "run_dir:"))]
        lines = [l.replace("epochs: 10", f"epochs: {args.lp_epochs}").replace("every: 10", "every: 0") for l in lines]
        if extra:  # the host plan counts the CUDA runtime's host memory (640 MiB): 1 GiB leaves no cache
            lines = [l.replace("budget: 1GiB", "budget: 2GiB") for l in lines]
        cfg = "\n".join([f"dataset: {args.fb15k}", "run_dir: RUN_DIR", "progress: false", "step_log: true",
                         "checkpoint_every: -1"] + lines + extra) + "\n"
        r = train(args.bin, cfg, tmp / f"fb15k-{len(name)}-{name.split(',')[0]}", 600)
        if r is None:
            continue
        epochs = [m["epoch_s"] for m in r["metrics"]][1:] or [r["metrics"][0]["epoch_s"]]
        cells = device_cells(r, 0) if "device" in r["summary"] else f"| | | {r['summary'].get('peak_rss_bytes', 0) / GIB:.2f} GiB"
        print(f"| {name} | {statistics.median(epochs):.3f} | {cells} |")
        sys.stdout.flush()


def bench_g20m(args, tmp: pathlib.Path) -> None:
    print(f"\n### Link prediction on the 20M-edge graph ({args.g20m}; configs/marius_g20m.yaml: DistMult d=50, "
          f"batch 10,000, 10 x 100 negatives, 16 partitions, 4 resident): one epoch on the GPU; the out-of-core "
          f"run's storage.budget is 2 GiB (the config's 1.25 GiB less the CUDA runtime's host memory held no "
          f"cache); median step after {args.warmup}\n")
    print("| configuration | epoch s | median step ms | GPU busy | copies | hidden | peak RSS | io/step | plan/step | "
          "mean step / 1.1 max(mem, io, plan) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    text = (ROOT / "configs/marius_g20m.yaml").read_text()
    base = [l for l in text.splitlines() if not l.startswith(("dataset:", "run_dir:")) and not l.lstrip().startswith("#")]
    base = [l.replace("every: 1", "every: 0").replace("budget: 1.25GiB", "budget: 2GiB") for l in base]
    mem_step = float("nan")
    for name, mode in (("GPU, in memory, same schedule", "in_memory"), ("GPU, out of core (4 of 16 resident)", "out_of_core")):
        lines = [l.replace("mode: out_of_core", f"mode: {mode}") for l in base]
        cfg = "\n".join([f"dataset: {args.g20m}", "run_dir: RUN_DIR", "progress: false", "step_log: true",
                         "checkpoint_every: -1"] + lines + [f"device: {{type: {args.device}}}"]) + "\n"
        r = train(args.bin, cfg, tmp / f"g20m-{mode}", 900)
        if r is None:
            continue
        step = step_seconds(r, args.warmup)
        over = "| |"
        if mode == "in_memory":
            mem_step = step
        else:
            over = overlap_cells(r, mem_step, args.warmup)
        print(f"| {name} | {r['metrics'][0]['epoch_s']:.2f} | {step * 1e3:.2f} | {device_cells(r, args.warmup)} | {over} |")
        sys.stdout.flush()


def bench_g20m_scale(args, tmp: pathlib.Path) -> None:
    """The 20M-edge graph with its node table 4x the budgets: a wider embedding (--g20m-dim) over
    finer partitions (the graph prepared with --partitions 32) so that the table dwarfs the
    process's fixed share (the CUDA runtime, staging); storage.budget is a quarter of the table
    (gpu_budget 0: the steps in flight only), raised to what the plan needs when it refuses."""
    m = json.loads((args.g20m_scale / "manifest.json").read_text())
    nodes, parts = m["counts"]["nodes"], m["partitions"]["count"]
    table = nodes * args.g20m_dim * 8  # a row: the embedding and its Adagrad state, float32
    budget = table / 4 / GIB
    print(f"\n### Link prediction on the 20M-edge graph, table 4x the budgets ({args.g20m_scale}; DistMult "
          f"d={args.g20m_dim}, batch 10,000, 10 x 100 negatives, {parts} partitions; node "
          f"table {table / GIB:.2f} GiB with its Adagrad state; the first {args.g20m_steps} steps of one epoch; "
          f"median step after {args.warmup})\n")
    print("| configuration | budget + gpu_budget | table / budgets | resident | epoch s | median step ms | GPU busy | "
          "copies | hidden | peak RSS | io/step | plan/step | mean step / 1.1 max(mem, io, plan) |\n"
          "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    text = (ROOT / "configs/marius_g20m.yaml").read_text()
    base = [l for l in text.splitlines() if not l.startswith(("dataset:", "run_dir:", "storage:", "  budget:",
                                                              "  resident:", "  slots:", "  mode:", "  run_ahead:"))
            and not l.lstrip().startswith("#")]
    base = [l.replace("every: 1", "every: 0").replace("dim: 50", f"dim: {args.g20m_dim}")
            .replace("epochs: 1", f"epochs: 1\n  max_steps: {args.g20m_steps}") for l in base]

    def config(storage: str) -> str:
        return "\n".join([f"dataset: {args.g20m_scale}", "run_dir: RUN_DIR", "progress: false", "step_log: true",
                          "checkpoint_every: -1"] + base + [f"storage: {storage}",
                                                           f"device: {{type: {args.device}, gpu_budget: 0}}"]) + "\n"

    ooc, errors = None, []
    for attempt in range(3):
        ooc = train(args.bin, config(f"{{mode: out_of_core, budget: {budget:.3f}GiB, run_ahead: 4}}"),
                    tmp / f"g20m-scale-ooc-{attempt}", 900, errors)
        need = re.search(r"\(([\d.]+) (MiB|GiB) in all\)", errors[-1]) if ooc is None and errors else None
        if ooc is not None or need is None:
            break
        budget = float(need.group(1)) / (1024 if need.group(2) == "MiB" else 1) + 0.01
    if ooc is None:
        print(f"| out of core | | | | failed: {errors[-1].strip()[-200:] if errors else '?'} |")
        return
    res = re.search(r"(\d+) of (\d+) partitions resident", ooc["stdout"])
    resident = res.group(1) if res else "0"
    mem = train(args.bin, config(f"{{mode: in_memory, resident: {resident}, run_ahead: 4}}"), tmp / "g20m-scale-mem",
                900)
    mem_step = step_seconds(mem, args.warmup) if mem else float("nan")
    for name, r in (("GPU, in memory, same schedule", mem), ("GPU, out of core", ooc)):
        if r is None:
            continue
        step = step_seconds(r, args.warmup)
        b = "| | |" if r is mem else f"| {budget:.2f} GiB | {table / GIB / budget:.2f}x |"
        over = "| |" if r is mem else overlap_cells(r, mem_step, args.warmup)
        print(f"| {name} {b} {resident} of {parts} | {r['metrics'][0]['epoch_s']:.2f} | "
              f"{step * 1e3:.2f} | {device_cells(r, args.warmup)} | {over} |")
        sys.stdout.flush()


NC = """task: node_classification
dataset: {ds}
run_dir: RUN_DIR
progress: false
step_log: true
checkpoint_every: -1
model: {{kind: graphsage, layers: 3, hidden: 256, fanouts: [15, 10, 5], dropout: 0.5}}
train: {{epochs: {epochs}, batch: {batch}, lr: 0.003, seed: 1, sampler: {sampler}}}
eval: {{every: {epochs}, split: test, batch: {batch}, fanouts: [15, 10, 5]}}
storage: {storage}
device: {{type: {device}, gpu_budget: {gpu_budget}, deterministic: {det}, planner: {planner}}}
"""


def nc_cells(run: dict, mem_step: float | None) -> tuple[float, float, str]:
    """Median step of the epochs after the first, the median epoch after the first, and the
    table's device, pipeline and criterion cells."""
    steps = [s for s in run["steps"] if int(s[0]) > 1] or run["steps"]
    step = statistics.median(float(s[2]) for s in steps)
    epochs = [m["epoch_s"] for m in run["metrics"]][1:] or [run["metrics"][0]["epoch_s"]]
    p = run["summary"].get("pipeline", {})
    n = max(1, len(run["steps"]))
    io, plan, sample = p.get("io_busy_s", 0) / n, p.get("plan_busy_s", 0) / n, p.get("sample_busy_s", 0) / n
    mean = statistics.fmean(float(s[2]) for s in steps)  # the criterion's step (a median hides waits)
    crit = f"{mean / (1.1 * max(mem_step, io, plan)):.2f}" if mem_step else ""
    acc = run["metrics"][-1].get("test", {}).get("accuracy")
    sampler = run["summary"].get("sampler", {}).get("device", "?")
    return step, statistics.median(epochs), (
        f"{device_cells(run, 0)} | {sample * 1e3:.1f} ms | {io * 1e3:.1f} ms | {plan * 1e3:.1f} ms | {crit} | "
        f"{sampler} | {'' if acc is None else f'{acc:.4f}'}")


def bench_nc(args, tmp: pathlib.Path) -> None:
    m = json.loads((args.nc / "manifest.json").read_text())
    f = m["files"]["nodes.features"]
    nodes, dim = f["shape"]
    row = f["bytes"] // nodes
    feat = f["bytes"]
    cache_rows = nodes // 4
    print(f"\n### Node classification on the GPU: {args.nc}, {nodes:,} nodes, {m['counts']['edges']['train']:,} "
          f"edges, {dim} features ({feat / GIB:.2f} GiB), {m['stats']['split_sizes']['train']:,} training nodes; "
          f"3-layer GraphSage, hidden 256, fanouts 15,10,5, batch {args.nc_batch}; {args.nc_epochs} epochs, "
          f"medians over the epochs after the first. Out of core: a feature cache of {cache_rows:,} rows "
          f"(a quarter of the rows) and device.gpu_budget 0 (the steps in flight only)\n")
    print("| configuration | epoch s | median step ms | GPU busy | copies | hidden | peak RSS | sample/step | "
          "io/step | plan/step | mean step / 1.1 max(mem, io, plan) | sampler | test accuracy |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    big = f"{int(feat * 1.5 / GIB) + 2}GiB"
    ooc = (f"{{mode: out_of_core, budget: {big}, cache_rows: {cache_rows}, planner: oracle, window: 4, "
           f"run_ahead: 2, io_group_gap: 16KiB}}")
    quarter = f"{int(feat / 4 / (1 << 20)) + 64}MiB"  # a quarter of the rows plus two staged steps
    configs = {  # name: (row, storage, gpu_budget, sampler, deterministic, device planner)
        "host-cpu": ("features in host RAM, CPU sampler", "{mode: in_memory}", "0", "cpu", "true", "lru"),
        "host-cuda": ("features in host RAM, CUDA sampler", "{mode: in_memory}", "0", "cuda", "true", "lru"),
        "gpu": ("features in GPU memory", "{mode: in_memory}", big, "auto", "true", "lru"),
        "gpu-static": ("features in host RAM, a quarter on the GPU (static, by in-degree)", "{mode: in_memory}",
                       quarter, "auto", "true", "static"),
        "ooc": ("out of core (features 4x the feature cache)", ooc, "0", "auto", "true", "lru"),
        "host-nondet": ("features in host RAM, nondeterministic kernels", "{mode: in_memory}", "0", "auto", "false",
                        "lru"),
        "gpu-nondet": ("features in GPU memory, nondeterministic kernels", "{mode: in_memory}", big, "auto", "false",
                       "lru"),
    }
    runs = [configs[c] for c in args.nc_configs.split(",")]
    steps, mem_step = {}, None
    for i, (name, storage, gpu_budget, sampler, det, planner) in enumerate(runs):
        def config(budget: str) -> str:
            return NC.format(ds=args.nc, epochs=args.nc_epochs, batch=args.nc_batch, sampler=sampler, storage=storage,
                             device=args.device, gpu_budget=budget, det=det, planner=planner)
        errors: list[str] = []
        r = train(args.bin, config(gpu_budget), tmp / f"nc-{i}", 600, errors)
        fixed = re.search(r"two steps' rows \(([\d.]+ \w+)\) and their staging \(([\d.]+ \w+)\)",
                          errors[-1]) if r is None and errors and planner == "static" else None
        if fixed:  # a quarter of the rows cached on the device besides the steps in flight
            gpu_budget = f"{int((feat / 4 + to_bytes(fixed.group(1)) + to_bytes(fixed.group(2))) / (1 << 20)) + 8}MiB"
            r = train(args.bin, config(gpu_budget), tmp / f"nc-{i}-b", 600)
        if r is None:
            continue
        step, epoch, cells = nc_cells(r, mem_step if storage.startswith("{mode: out_of_core") else None)
        steps[name] = (step, epoch)
        if storage == "{mode: in_memory}" and gpu_budget == "0" and det == "true":
            mem_step = step if mem_step is None else min(mem_step, step)
        label = f"{name} (gpu_budget {gpu_budget})" if planner == "static" else name
        print(f"| {label} | {epoch:.3f} | {step * 1e3:.1f} | {cells} |")
        sys.stdout.flush()
    ooc = steps.get("out of core (features 4x the feature cache)")
    if ooc and mem_step:
        gpu = steps.get("features in GPU memory")
        print(f"\nOut of core / in memory (host RAM): {ooc[0] / mem_step:.2f}x the step time"
              + (f"; / in GPU memory: {ooc[0] / gpu[0]:.2f}x" if gpu else "")
              + " (GraphBolt: 3.4x with 19% of the features cached, 1.13x with 47%).")
    if args.pyg_export_bin:
        cmd = [PY, str(ROOT / "bench/pyg_reference.py"), str(args.nc), "--export-bin", str(args.pyg_export_bin),
               "--batch", str(args.nc_batch), "--epochs", str(args.nc_epochs),
               "--device", "cuda" if args.device == "cuda" else "cpu"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        log(out.stderr.strip()[-1500:])
        if out.returncode != 0:
            print(f"\nPyG reference failed: {out.stderr.strip()[-300:]}")
            return
        ref = json.loads(out.stdout.strip().splitlines()[-1])
        pyg_epoch = statistics.median(ref["epoch_s"][1:] or ref["epoch_s"])
        print(f"\nPyTorch Geometric on the same GPU ({ref['mode']}; features in GPU memory): {pyg_epoch:.3f} s an "
              f"epoch, test accuracy {ref['test_accuracy']:.4f}.")
        for name, (step, epoch) in steps.items():
            print(f"- sluice {name}: {epoch:.3f} s an epoch, {pyg_epoch / epoch:.2f}x PyG's speed")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dlrm", type=pathlib.Path, help="a gen-clicks dataset")
    p.add_argument("--fb15k", type=pathlib.Path, help="FB15k-237 prepared with --partitions 4")
    p.add_argument("--g20m", type=pathlib.Path, help="configs/marius_g20m.yaml's generated graph")
    p.add_argument("--g20m-scale", type=pathlib.Path,
                   help="the 20M-edge graph prepared with --partitions 32: its table 4x the budgets")
    p.add_argument("--g20m-dim", type=int, default=768, help="embedding dimension of the --g20m-scale run")
    p.add_argument("--g20m-steps", type=int, default=300, help="steps of the --g20m-scale runs")
    p.add_argument("--nc", type=pathlib.Path, help="a gen-nc dataset")
    p.add_argument("--nc-batch", type=int, default=512)
    p.add_argument("--nc-epochs", type=int, default=3)
    p.add_argument("--nc-configs", default="host-cpu,host-cuda,gpu,ooc",
                   help="which rows: host-cpu, host-cuda, gpu, gpu-static, ooc, host-nondet, gpu-nondet")
    p.add_argument("--pyg-export-bin", type=pathlib.Path, help="bench/nc_blocks_export: run bench/pyg_reference.py")
    p.add_argument("--bin", type=pathlib.Path, default=ROOT / "build/gpu/train/sluice")
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[16384, 65536])
    p.add_argument("--steps", type=int, default=25, help="steps per DLRM run")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the median")
    p.add_argument("--budget-gib", type=float, default=2.5, help="storage.budget of the out-of-core runs")
    p.add_argument("--gpu-budget-gib", type=float, default=0.5, help="device.gpu_budget")
    p.add_argument("--scale", type=float, default=4.0, help="tables / (budget + gpu_budget)")
    p.add_argument("--lp-epochs", type=int, default=4)
    p.add_argument("--device", default="cuda", help="device.type of the sluice rows (emulated: a dry run on a CPU)")
    p.add_argument("--tmp", type=pathlib.Path, help="where runs go (default: a temporary folder)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        if args.nc:
            bench_nc(args, pathlib.Path(tmp))
        if args.fb15k:
            bench_fb15k(args, pathlib.Path(tmp))
        if args.g20m:
            bench_g20m(args, pathlib.Path(tmp))
        if args.g20m_scale:
            bench_g20m_scale(args, pathlib.Path(tmp))
        if args.dlrm:
            bench_dlrm(args, pathlib.Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
