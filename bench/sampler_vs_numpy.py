#!/usr/bin/env python3
"""k-hop sampling: sluice's sampler against a vectorised numpy implementation of the same
sampler (DENSE-style: each hop samples the nodes the previous hop added; with replacement:
random offsets into the CSR; np.unique for the new layer; searchsorted for local indices; no
Python loop per node), on the same generated power-law graph, in the same run.

  /usr/bin/python3 bench/sampler_vs_numpy.py [--nodes 1000000] [--edges 10000000] [--rounds 3]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def numpy_khop(offsets, neighbors, seeds, fanouts, rng):
    layer = np.unique(seeds)  # (order differs from sluice's first-occurrence order; cost is alike)
    frontier = layer
    edges = 0
    for fanout in fanouts:
        deg = offsets[frontier + 1] - offsets[frontier]
        has = deg > 0
        f, d = frontier[has], deg[has]
        pos = offsets[f][:, None] + (rng.random((len(f), fanout)) * d[:, None]).astype(np.int64)
        sampled = neighbors[pos].ravel()
        edges += sampled.size
        merged = np.unique(np.concatenate([layer, sampled]))
        new = np.setdiff1d(merged, layer, assume_unique=True)
        _local = np.searchsorted(merged, sampled)  # local indices into the layer
        layer, frontier = merged, new
    return edges, layer.size


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1_000_000, help="graph nodes")
    p.add_argument("--edges", type=int, default=10_000_000, help="graph edges (>= 10M for the issue)")
    p.add_argument("--batch", type=int, default=1024, help="seeds per batch")
    p.add_argument("--batches", type=int, default=30, help="batches per measurement")
    p.add_argument("--rounds", type=int, default=3, help="alternating measurements of each")
    p.add_argument("--bench", type=pathlib.Path, default=ROOT / "build/release/bench/sampler_bench")
    p.add_argument("--cuda", action="store_true",
                   help="also time the CUDA sampler (a --bench built with SLUICE_CUDA, a GPU)")
    args = p.parse_args()
    fanouts = [15, 10, 5]
    rng = np.random.default_rng(0)
    src = rng.integers(0, args.nodes, args.edges)
    dst = np.minimum((args.nodes * rng.random(args.edges) ** 3).astype(np.int64), args.nodes - 1)
    perm = rng.permutation(args.nodes)
    src, dst = perm[src], perm[dst]
    order = np.argsort(src, kind="stable")
    neighbors = dst[order]
    offsets = np.zeros(args.nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=args.nodes), out=offsets[1:])
    results = {"numpy (vectorised, 1 thread)": [], "sluice, 1 thread": [], "sluice, 2 threads": []}
    if args.cuda:
        results["sluice CUDA"] = []
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "src.bin").write_bytes(src.astype(np.int64).tobytes())
        (pathlib.Path(tmp) / "dst.bin").write_bytes(dst.astype(np.int64).tobytes())
        for r in range(args.rounds):
            t = time.perf_counter()
            edges = 0
            for b in range(args.batches):
                seeds = rng.integers(0, args.nodes, args.batch)
                edges += numpy_khop(offsets, neighbors, seeds, fanouts, rng)[0]
            results["numpy (vectorised, 1 thread)"].append(edges / (time.perf_counter() - t))
            runs = [(f"sluice, {t} thread{'s' if t > 1 else ''}", ["--threads", str(t)])
                    for t in (1, 2)]
            if args.cuda:
                runs.append(("sluice CUDA", ["--threads", "2", "--cuda"]))
            for name, extra in runs:
                out = subprocess.run([str(args.bench), "--src", f"{tmp}/src.bin", "--dst",
                                      f"{tmp}/dst.bin", "--nodes", str(args.nodes), "--batch",
                                      str(args.batch), "--batches", str(args.batches), "--replace",
                                      *extra],
                                     check=True, capture_output=True, text=True).stdout
                results[name].append(json.loads(out)["edges_per_s"])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in results.items()),
                  file=sys.stderr)
    base = statistics.median(results["numpy (vectorised, 1 thread)"])
    print(f"\nk-hop sampling, fanouts 15,10,5 with replacement, batch {args.batch}, power-law graph "
          f"of {args.nodes:,} nodes and {args.edges:,} edges; medians of {args.rounds} rounds\n")
    print("| sampler | sampled edges/s | vs numpy |\n|---|---:|---:|")
    for k, v in results.items():
        m = statistics.median(v)
        print(f"| {k} | {m:,.0f} | {m / base:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
