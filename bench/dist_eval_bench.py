#!/usr/bin/env python3
"""Evaluation across local processes (docs/distributed.md): what each rank holds and how long a
validation takes at 1, 2 and 3 ranks. Rank 0's summary gives the evaluation's seconds and the
run's peak RSS (the training steps are few, so the validation sets the peak); every world size
must report the one-process metric to the last digit. With --before BIN the same runs of another
build, interleaved, in the same rounds.

--task lp (link prediction): a generated community graph (--nodes, DistMult with reciprocal
relations, --dim floats a row, Adagrad), a few training steps, then one validation of
--max-edges edges ranked against every node (filtered), or with --ranking sampled against
eval.sampled_negatives sampled nodes.

--task nc (node classification with learnable embeddings, --dim floats a node): a generated
graph (gen-nc, --nodes and --edges, 1% of the nodes training ones), one epoch of GraphSAGE
(2 layers, 64 hidden), then one validation layer by layer over every neighbour, out of core in
--nc-budget a rank; --classes and --valid-frac size the logits the ranks share.

--task dlrm (recommendation): a generated click log (gen-clicks, --samples, 26 tables of
100,000 rows of --dim floats with Adagrad), 5 training steps out of core in --nc-budget a rank,
then one evaluation of the test split (10% of the samples).

  /usr/bin/python3 bench/dist_eval_bench.py [--task lp|nc|dlrm] [--nodes 1000000] [--dim 64]
                                            [--ranks 1,2,3] [--rounds 3] [--ranking exact|sampled]
                                            [--classes 8] [--valid-frac 0.1]
                                            [--before /tmp/before/sluice]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
sys.path.insert(0, str(ROOT / "bench"))
from dist_bench import make_lp_data  # noqa: E402  the same generated community graph, another size


def config(tmp: pathlib.Path, data: pathlib.Path, args) -> pathlib.Path:
    exact = 2**62 if args.ranking == "exact" else 1000
    cfg = tmp / "eval.yaml"
    cfg.write_text(f"dataset: {data}\nrun_dir: {tmp / 'run'}\nprogress: false\ncheckpoint_every: 0\n"
                   f"model: {{decoder: distmult, dim: {args.dim}, reciprocal: true}}\n"
                   "train: {epochs: 1, max_steps: 5, batch: 10000, chunks: 10, negatives: 100, lr: 0.1, "
                   "schedule: shuffle, seed: 1, virtual_shards: 6}\n"
                   f"eval: {{every: 1, max_edges: {args.max_edges}, exact_max_nodes: {exact}, sampled_negatives: 10000}}\n"
                   "storage: {mode: in_memory}\ndist: {interface: lo, op_timeout: 1200}\n")
    return cfg


def prep(verb: str, path: pathlib.Path, *args: str) -> None:
    out = subprocess.run([PY, str(ROOT / "scripts/sluice_prep.py"), verb, *args, "--seed", "1", "--out", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dist_eval_bench: {verb} failed: {out.stderr.strip()}")


def make_nc_data(path: pathlib.Path, nodes: int, edges: int, classes: int, valid_frac: float) -> None:
    prep("gen-nc", path, "--nodes", str(nodes), "--edges", str(edges), "--features", "4", "--classes", str(classes),
         "--train-frac", "0.01", "--valid-frac", str(valid_frac), "--test-frac", "0.1")


def nc_config(tmp: pathlib.Path, data: pathlib.Path, args) -> pathlib.Path:
    cfg = tmp / "eval-nc.yaml"
    cfg.write_text(f"task: node_classification\ndataset: {data}\nrun_dir: {tmp / 'run'}\nprogress: false\n"
                   "checkpoint_every: 0\n"
                   f"model: {{kind: graphsage, layers: 2, hidden: 64, fanouts: [10, 5], embedding_dim: {args.dim}}}\n"
                   "train: {epochs: 1, batch: 1000, lr: 0.01, seed: 1, virtual_shards: 6, "
                   "embedding_optimizer: rowwise_adagrad, embedding_lr: 0.1}\n"
                   "eval: {every: 1, fanouts: [], batch: 1000}\n"
                   f"storage: {{mode: out_of_core, budget: {args.nc_budget}}}\n"
                   "dist: {interface: lo, op_timeout: 1200}\n")
    return cfg


def make_click_data(path: pathlib.Path, samples: int) -> None:
    prep("gen-clicks", path, "--samples", str(samples), "--sparse", "26", "--dense", "13", "--vocab", "200000")


def dlrm_config(tmp: pathlib.Path, data: pathlib.Path, args) -> pathlib.Path:
    cfg = tmp / "eval-dlrm.yaml"
    cfg.write_text(f"task: recommendation\ndataset: {data}\nrun_dir: {tmp / 'run'}\nprogress: false\n"
                   "checkpoint_every: 0\n"
                   f"model: {{dim: {args.dim}, bottom: [64, {args.dim}], top: [64], ids: modulo, table_rows: 100000}}\n"
                   "train: {epochs: 1, max_steps: 5, batch: 2048, lr: 0.05, seed: 1, virtual_shards: 6}\n"
                   "eval: {every: 1}\n"
                   f"storage: {{mode: out_of_core, budget: {args.nc_budget}}}\n"
                   "dist: {interface: lo, op_timeout: 1200}\n")
    return cfg


def run(binary: str, cfg: pathlib.Path, n: int, run_dir: pathlib.Path) -> dict:
    sets = ["--set", f"run_dir={run_dir}"]
    if n == 1:
        cmd = [binary, "train", str(cfg)] + sets
    else:
        cmd = [PY, str(ROOT / "scripts/sluice_launch.py"), "-n", str(n), "--", binary, "train", str(cfg)] + sets
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dist_eval_bench: {n} ranks failed: {out.stderr.strip()[-2000:]}")
    s = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = metrics[-1].get("valid") or metrics[-1]["test"]  # recommendation without a valid split: test
    return {"eval_s": s["eval_s"], "rss_mib": s["peak_rss_bytes"] / 2**20,
            "metric": next(valid[k] for k in ("mrr", "accuracy", "auc") if k in valid)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=["lp", "nc", "dlrm"], default="lp")
    p.add_argument("--nc-budget", default="400MiB", help="--task nc and dlrm: storage.budget of each rank")
    p.add_argument("--samples", type=int, default=1_000_000, help="--task dlrm: click-log samples (10%% the test split)")
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=4_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--classes", type=int, default=8, help="--task nc: classes (a validation node's logits)")
    p.add_argument("--valid-frac", type=float, default=0.1, help="--task nc: the validation split's share of the nodes")
    p.add_argument("--max-edges", type=int, default=1000, help="validation edges ranked (eval.max_edges)")
    p.add_argument("--ranks", default="1,2,3")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ranking", choices=["exact", "sampled"], default="exact")
    p.add_argument("--bin", default=str(ROOT / "build/release/train/sluice"))
    p.add_argument("--before", default="", help="another build to run beside --bin")
    args = p.parse_args()
    builds = [("this build", args.bin)] + ([("before", args.before)] if args.before else [])
    ranks = [int(x) for x in args.ranks.split(",")]
    with tempfile.TemporaryDirectory(prefix="dist-eval-", dir=ROOT / "build") as t:
        tmp = pathlib.Path(t)
        if args.task == "lp":
            make_lp_data(tmp / "ds", args.nodes, args.edges)
            cfg = config(tmp, tmp / "ds", args)
        elif args.task == "nc":
            make_nc_data(tmp / "ds", args.nodes, args.edges, args.classes, args.valid_frac)
            cfg = nc_config(tmp, tmp / "ds", args)
        else:
            make_click_data(tmp / "ds", args.samples)
            cfg = dlrm_config(tmp, tmp / "ds", args)
        results: dict = {}
        for r in range(args.rounds):
            for name, binary in builds:
                for n in ranks:
                    m = run(binary, cfg, n, tmp / f"run-{r}-{name.replace(' ', '-')}-{n}")
                    results.setdefault((name, n), []).append(m)
                    print(f"round {r + 1}: {name}, {n} ranks: {m}", file=sys.stderr, flush=True)
    # Within a build every world size must rank as one process does (builds may differ).
    same = all(len({m["metric"] for (b, _), ms in results.items() if b == name for m in ms}) == 1 for name, _ in builds)
    metric = {"lp": "MRR", "nc": "accuracy", "dlrm": "AUC"}[args.task]
    if args.task == "dlrm":
        what = (f"{args.samples:,} samples, 26 tables of 100,000 rows, 5 training steps, then the test split's "
                f"{args.samples // 10:,} samples in steps of 2,048, {args.nc_budget} a rank")
    elif args.task == "lp":
        table_mib = args.nodes * args.dim * 8 / 2**20
        what = (f"node table {table_mib:.0f} MiB with Adagrad's state, embeddings {table_mib / 2:.0f} MiB), "
                f"{args.ranking} ranking of {args.max_edges} edges")
    else:
        table_mib = args.nodes * (args.dim + 1) * 4 / 2**20
        what = (f"node table {table_mib:.0f} MiB with row-wise Adagrad's state), layer-wise validation over every "
                f"neighbour of {args.valid_frac:.0%} of the nodes, {args.classes} classes, {args.nc_budget} a rank")
    print(f"{'' if args.task == 'dlrm' else f'{args.nodes:,} nodes, '}dim {args.dim} ({what}; medians of {args.rounds} rounds; "
          f"{metric} {'the same at every world size' if same else 'DIFFERS between world sizes'}\n")
    print(f"| build | ranks | validation s | peak RSS MiB (rank 0) | {metric} |\n|---|---:|---:|---:|---:|")
    for (name, n), ms in results.items():
        med = {k: statistics.median(m[k] for m in ms) for k in ("eval_s", "rss_mib")}
        print(f"| {name} | {n} | {med['eval_s']:.2f} | {med['rss_mib']:.0f} | {ms[0]['metric']:.4f} |")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
