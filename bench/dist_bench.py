#!/usr/bin/env python3
"""Data-parallel recommendation training across local processes (docs/distributed.md): the same
click log and config at 1, 2 and 4 ranks (scripts/sluice_launch.py, each rank its share of the
cores), interleaved over --rounds, medians. Per training step on rank 0: compute (gathers,
forward/backward of its shards, row updates), local io (waiting for its own rows) and
communication (rows and use gradients by all-to-all, losses and dense gradients by all-gather;
waiting for the slowest rank included); bytes received per step measured against the formula

    4 [ (N-1)/N D_r w  +  (N-1)/N (B/N) S w  +  (N-1) (ceil(V/N) (1 + P) + R) ]

(D_r: the distinct rows rank r's shards use, from the run; w: row width; P: dense parameters;
B: batch; S: tables; V: virtual shards; R: the rounds the dense gradients travel in,
ceil((1 + P) / C) with C = (floor(4M / N) - 1) // ceil(V/N) columns a round; rows and uses spread evenly over the owners). On a 2-core machine more local ranks measure contention,
not scaling: every rank computes on the same two cores. One checkpoint at the end of the epoch
(rank 0's seconds: each rank writes its shard of the tables, docs/distributed.md).

--task nc: node classification (GraphSage, 2 layers, features out of core) on a generated graph;
only the shards' losses and dense gradients travel, 4 (N-1) (ceil(V/N) (1 + P) + R) bytes a step;
compute is sampling waits excluded (gathers, forward/backward of its shards, the optimizer).
With --nc-embeddings D the nodes' inputs are learnable embeddings of D floats instead (row-wise
Adagrad), sharded by row range: the formula is the recommendation one with U, the step's row
uses (every shard's sampled nodes, from the run), in place of B S; --storage both (the default)
runs them in memory and out of core (a row cache of --cache-share of each rank's rows).

With --nc-spill K (features) each world size also trains through the spill (storage.spill_steps:
K; each rank sweeps its own copy of the features once every K steps into its units' packs).

--task lp: link prediction (DistMult, reciprocal relations, the global shuffle) on a generated
single-relation community graph; the formula is the recommendation one with the step's row uses
U = 2 Q + V ceil(chunks / V) negatives in place of B S (Q = 2 B queries). --storage both (the
default) runs each world size with the node table in memory and out of core, each rank's rows
through a row cache of --cache-share of its rows (storage.cache_rows), in the same rounds.

  /usr/bin/python3 bench/dist_bench.py [--task dlrm|nc|lp] [--data DIR] [--ranks 1,2,4] [--rounds 3]
                                       [--storage in_memory|out_of_core|both] [--cache-share 0.25]
                                       [--max-steps 500] [--nc-embeddings 0] [--nc-spill 0]
                                       [--nc-budget 320MiB]
"""
import argparse
import json
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable

B, S, DIM, V = 2048, 26, 16, 12
EMB_DIM = 0  # --nc-embeddings
MLP = 0  # --dlrm-mlp
DLRM_BUDGET = "400MiB"  # --dlrm-budget


def make_data(path: pathlib.Path) -> None:
    out = subprocess.run([PY, str(ROOT / "scripts/sluice_prep.py"), "gen-clicks", "--samples", "300000",
                          "--sparse", str(S), "--dense", "13", "--vocab", "200000", "--seed", "1",
                          "--out", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dist_bench: gen-clicks failed: {out.stderr.strip()}")


def config(tmp: pathlib.Path, data: pathlib.Path) -> pathlib.Path:
    cfg = tmp / "dist.yaml"
    mlps = f"bottom: [{MLP}, {MLP}, {DIM}], top: [{MLP}, {MLP}]" if MLP else f"bottom: [64, {DIM}], top: [64]"
    cfg.write_text(f"task: recommendation\ndataset: {data}\nrun_dir: {tmp / 'run'}\nprogress: false\n"
                   "checkpoint_every: 0\n"
                   f"model: {{dim: {DIM}, {mlps}, ids: modulo, table_rows: 100000}}\n"
                   f"train: {{epochs: 1, batch: {B}, lr: 0.05, seed: 1, virtual_shards: {V}}}\n"
                   "eval: {every: 0}\n"
                   f"storage: {{mode: out_of_core, budget: {DLRM_BUDGET}}}\n"
                   "dist: {interface: lo}\n")
    return cfg


NC_B, NC_HIDDEN, NC_NODES = 512, 64, 300_000


def make_nc_data(path: pathlib.Path) -> None:
    out = subprocess.run([PY, str(ROOT / "scripts/sluice_prep.py"), "gen-nc", "--nodes", str(NC_NODES), "--edges", "3000000",
                          "--features", "256", "--classes", "8", "--seed", "1", "--out", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dist_bench: gen-nc failed: {out.stderr.strip()}")


NC_BUDGET = "320MiB"  # --nc-budget


def nc_config(tmp: pathlib.Path, data: pathlib.Path, embeddings: int = 0) -> pathlib.Path:
    cfg = tmp / "dist-nc.yaml"
    emb = f", embedding_dim: {embeddings}" if embeddings else ""
    row_opt = ", embedding_optimizer: rowwise_adagrad, embedding_lr: 0.1" if embeddings else ""
    cfg.write_text(f"task: node_classification\ndataset: {data}\nrun_dir: {tmp / 'run'}\nprogress: false\n"
                   "checkpoint_every: 0\n"
                   f"model: {{kind: graphsage, layers: 2, hidden: {NC_HIDDEN}, fanouts: [10, 5]{emb}}}\n"
                   f"train: {{epochs: 1, batch: {NC_B}, lr: 0.01, seed: 1, virtual_shards: {V}{row_opt}}}\n"
                   "eval: {every: 0}\n"
                   f"storage: {{mode: out_of_core, budget: {NC_BUDGET}}}\n"
                   "dist: {interface: lo}\n")
    return cfg


LP_B, LP_DIM, LP_CHUNKS, LP_NEG = 1000, 64, 10, 500


def make_lp_data(path: pathlib.Path, nodes: int = 200_000, edges: int = 2_000_000) -> None:
    tsv = path.parent / "lp-graph.tsv"
    for cmd in (["gen-graph", "--kind", "community", "--communities", "50", "--nodes", str(nodes), "--edges", str(edges),
                 "--seed", "1", "--out", str(tsv)],
                ["edges", str(tsv), "--out", str(path), "--partitions", "4", "--valid-frac", "0.001",
                 "--test-frac", "0.001"]):
        out = subprocess.run([PY, str(ROOT / "scripts/sluice_prep.py")] + cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"dist_bench: sluice_prep.py {cmd[0]} failed: {out.stderr.strip()}")


def lp_config(tmp: pathlib.Path, data: pathlib.Path) -> pathlib.Path:
    cfg = tmp / "dist-lp.yaml"
    cfg.write_text(f"dataset: {data}\nrun_dir: {tmp / 'run'}\nprogress: false\ncheckpoint_every: 0\n"
                   f"model: {{decoder: distmult, dim: {LP_DIM}, reciprocal: true}}\n"
                   f"train: {{epochs: 1, batch: {LP_B}, chunks: {LP_CHUNKS}, negatives: {LP_NEG}, lr: 0.1, "
                   f"schedule: shuffle, seed: 1, virtual_shards: {V}}}\n"
                   "eval: {every: 0}\nstorage: {mode: in_memory, run_ahead: 2}\ndist: {interface: lo}\n")
    return cfg


def lp_rows() -> int:
    """The node table's rows: 4 partitions of 50,000 nodes (rows of 512 bytes: whole pages, no padding)."""
    return 4 * 50_000


ROUND_FLOATS = 4 << 20  # DataParallel::kExchangeRoundFloats


def dense_bytes(dp: dict, n: int) -> float:
    """Every other rank's shard losses and dense gradients (each rank's part padded to ceil(V/N)
    shards) and its stop flag, in R rounds of at most ROUND_FLOATS gathered floats."""
    width = 1 + dp["dense_floats"]
    rounds = math.ceil(width / max(1, (ROUND_FLOATS // n - 1) // math.ceil(V / n)))
    return 4 * (n - 1) * (math.ceil(V / n) * width + rounds)


def row_bytes(dp: dict, n: int, uses: float, w: int) -> float:
    """Sharded rows (train/sharded_rows.h): rows from the other owners and the other ranks' uses of
    this rank's rows (ownership spread evenly), plus the dense part."""
    return 4 * ((n - 1) / n * dp["rows_needed_per_step"] * w + (n - 1) / n * (uses / n) * w) + dense_bytes(dp, n)


def figures(s: dict, predicted: float, compute_s: float, wait_s: float) -> dict:
    """Per step on rank 0; compute_s excludes the exchange."""
    dp = s["data_parallel"]
    steps = max(1, dp["exchanges"])
    return {"samples_s": s["units_per_s"], "compute_ms": 1e3 * compute_s / steps,
            "io_ms": 1e3 * wait_s / steps, "comm_ms": 1e3 * dp["exchange_s"] / steps,
            "received_kb": dp["bytes_received"] / steps / 1024, "predicted_kb": predicted / 1024,
            "rows_owned": dp["rows_owned"], "rss_mb": s["peak_rss_bytes"] / 2**20,
            "plan_mb": s.get("predicted_peak_bytes", 0) / 2**20,
            "ahead_pct": 100 * dp.get("rows_ahead", 0) / max(1, dp.get("remote_rows", 0)),
            "ckpt_s": sum(c["s"] for c in s["checkpoints"]["each"]),
            # The row pipeline's reads (a spill's pack reads included) and the spill's pack writes.
            "read_mb": s.get("io", {}).get("bytes", 0) / steps / 1e6,
            "written_mb": s.get("spill", {}).get("bytes_written", 0) / steps / 1e6}


def train(binary, cfg: pathlib.Path, run_dir: pathlib.Path, ranks: int, *sets: str) -> dict:
    cmd = [str(binary), "train", str(cfg), "--set", f"run_dir={run_dir}", "--overwrite"]
    for x in sets:
        cmd += ["--set", x]
    if ranks > 1:
        cmd = [PY, str(ROOT / "scripts/sluice_launch.py"), "-n", str(ranks), "--logs", str(run_dir) + "-logs",
               "--"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dist_bench: {ranks} ranks failed: {out.stderr.strip()[-2000:]}")
    s = json.loads((run_dir / "summary.json").read_text())
    dp = s["data_parallel"]
    if "compute" in s and "model_s" in s["compute"]:  # node classification (the exchanges excluded)
        c = s["compute"]
        predicted = row_bytes(dp, ranks, dp["uses_per_step"], EMB_DIM) if EMB_DIM else dense_bytes(dp, ranks)
        return figures(s, predicted, c["gather_s"] + c["model_s"], s["pipeline"]["compute_wait_s"])
    t = s["time"]
    sharded = t["gather_s"] + t["compute_s"] + t["update_s"]  # each without the exchanges in it
    if "sampler_busy_s" in t:  # link prediction: a step's row uses are its queries' and negatives'
        uses = 2 * (2 * LP_B) + V * math.ceil(LP_CHUNKS / V) * LP_NEG
        return figures(s, row_bytes(dp, ranks, uses, LP_DIM), sharded, t["pipeline_wait_s"])
    return figures(s, row_bytes(dp, ranks, B * S, DIM), sharded, t["io_wait_s"])  # no linear term here


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=["dlrm", "nc", "lp"], default="dlrm")
    p.add_argument("--data", default="", help="a click log or, with --task nc, a node-classification "
                   "dataset (default: generated here)")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bin", default=str(ROOT / "build/release/train/sluice"))
    p.add_argument("--storage", "--lp-storage", dest="storage", choices=["in_memory", "out_of_core", "both"],
                   default="both", help="--task lp, or nc with --nc-embeddings: where the sharded table lives")
    p.add_argument("--cache-share", type=float, default=0.25,
                   help="out of core (--task lp, nc with --nc-embeddings): each rank's row cache as a share of its rows")
    p.add_argument("--max-steps", type=int, default=500,
                   help="--task lp, or dlrm with --dlrm-mlp: steps of each run (0: the whole epoch)")
    p.add_argument("--dlrm-mlp", type=int, default=0,
                   help="--task dlrm: MLPs of two layers this wide (bottom W, W, 16; top W, W) instead of 64 wide")
    p.add_argument("--dlrm-budget", default="400MiB", help="--task dlrm: storage.budget of each rank")
    p.add_argument("--before", default="", help="another build's sluice, run interleaved beside --bin in every round")
    p.add_argument("--nc-embeddings", type=int, default=0,
                   help="--task nc: learnable node embeddings of this width instead of the features (0: features)")
    p.add_argument("--nc-spill", type=int, default=0,
                   help="--task nc with features: also run each world size through the spill "
                   "(storage.spill_steps of this many steps, the static planner, io_group_gap 16KiB)")
    p.add_argument("--nc-budget", default="320MiB", help="--task nc: storage.budget of each rank")
    p.add_argument("--prefetch-rows", choices=["auto", "on", "off", "both"], default="auto",
                   help="dist.prefetch_rows across processes (on: the next step's rows that a step does not use "
                   "travel while it computes; off: at their step; both: each, interleaved). The ranks here share "
                   "one machine, where auto, the default, is off")
    a = p.parse_args()
    global EMB_DIM, NC_BUDGET, MLP, DLRM_BUDGET
    DLRM_BUDGET = a.dlrm_budget
    EMB_DIM = a.nc_embeddings if a.task == "nc" else 0
    MLP = a.dlrm_mlp if a.task == "dlrm" else 0
    NC_BUDGET = a.nc_budget
    ranks = [int(r) for r in a.ranks.split(",")]
    modes = ["in_memory", "out_of_core"] if a.storage == "both" else [a.storage]
    if a.task != "lp" and not EMB_DIM:
        modes = [""] + ([f"spill {a.nc_spill}"] if a.task == "nc" and a.nc_spill else [])
    table_rows = lp_rows() if a.task == "lp" else NC_NODES

    def sets(n: int, mode: str) -> list:
        if not mode:
            return [f"train.max_steps={a.max_steps}"] if MLP else []
        if mode.startswith("spill"):
            return [f"storage.spill_steps={a.nc_spill}", "storage.planner=static", "storage.io_group_gap=16KiB"]
        out = [f"storage.mode={mode}"] + ([f"train.max_steps={a.max_steps}"] if a.task == "lp" else [])
        if mode == "out_of_core":
            out.append(f"storage.cache_rows={math.ceil(a.cache_share * table_rows / n)}")
        return out

    with tempfile.TemporaryDirectory(prefix="dist-bench-") as t:
        tmp = pathlib.Path(t)
        data = pathlib.Path(a.data) if a.data else tmp / "data"
        make, conf = {"dlrm": (make_data, config), "nc": (make_nc_data, nc_config), "lp": (make_lp_data, lp_config)}[a.task]
        if not a.data:
            make(data)
        cfg = conf(tmp, data, EMB_DIM) if EMB_DIM else conf(tmp, data)
        ahead = {"auto": ["auto"], "on": ["on"], "off": ["off"], "both": ["on", "off"]}[a.prefetch_rows]
        builds = {"": a.bin, "before": a.before} if a.before else {"": a.bin}
        keys = [(n, m, f, b) for n in ranks for m in modes for f in (ahead if n > 1 else ahead[:1]) for b in builds]
        runs = {k: [] for k in keys}
        for _ in range(a.rounds):
            for n, m, f, b in keys:
                runs[(n, m, f, b)].append(train(builds[b], cfg, tmp / f"run{n}{m.replace(' ', '')}{f}{b}", n,
                                                *sets(n, m), f"dist.prefetch_rows={f}"))
    med = {k: {f: statistics.median(r[f] for r in runs[k]) for f in runs[k][0]} for k in keys}
    base = med[keys[0]]["samples_s"]
    if a.task == "lp":
        print(f"DistMult d={LP_DIM}, reciprocal, batch {LP_B}, {V} virtual shards of ceil({LP_CHUNKS}/{V}) chunks x {LP_NEG} "
              f"negatives, run-ahead 2; out of core: a row cache of {a.cache_share:g} of each rank's rows; medians of "
              f"{a.rounds} rounds; per step on rank 0 (local io: compute waiting for the pipeline: samples and rows)")
    elif a.task == "nc":
        inputs = (f"learnable embeddings d={EMB_DIM} (row-wise Adagrad; out of core a row cache of {a.cache_share:g} "
                  f"of each rank's rows)") if EMB_DIM else "features"
        print(f"GraphSage 2 layers, hidden {NC_HIDDEN}, fanouts 10,5, batch {NC_B}, {V} virtual shards, {inputs}, "
              f"medians of {a.rounds} rounds; per step on rank 0 (local io: compute waiting for the pipeline)")
    else:
        mlp = f"MLPs bottom {MLP}, {MLP}, {DIM} and top {MLP}, {MLP}" if MLP else "MLPs bottom 64 and top 64"
        print(f"batch {B}, {S} tables x dim {DIM}, {mlp}, {V} virtual shards, medians of {a.rounds} rounds; per step on rank 0")
    if a.before:
        print(f"build: this one ({a.bin}) or before ({a.before}), interleaved in every round")
    print("| ranks | build | storage | rows ahead | units/s | vs first | compute ms | local io ms | communication ms | "
          "received KiB/step | formula KiB/step | remote rows sent ahead % | rows owned | peak RSS MiB | planned peak MiB | checkpoint s | "
          "MB read/step | MB spilled/step |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, mode, f, b in keys:
        m = med[(n, mode, f, b)]
        print(f"| {n} | {b or 'this'} | {mode or '-'} | {f if n > 1 else '-'} | {m['samples_s']:,.0f} | {m['samples_s'] / base:.2f} | "
              f"{m['compute_ms']:.1f} | {m['io_ms']:.1f} | {m['comm_ms']:.1f} | {m['received_kb']:.1f} | "
              f"{m['predicted_kb']:.1f} | {m['ahead_pct']:.1f} | {m['rows_owned']:,.0f} | {m['rss_mb']:.0f} | {m['plan_mb']:.0f} | {m['ckpt_s']:.2f} | "
              f"{m['read_mb']:.1f} | {m['written_mb']:.1f} |")


if __name__ == "__main__":
    main()
