"""Generators of large synthetic graphs, streamed in chunks."""
from __future__ import annotations

import pathlib
import sys

import numpy as np

from .graph import Progress
from .writer import PrepError

CHUNK = 1 << 20


def edge_chunks(kind: str, nodes: int, edges: int, seed: int, skew: float = 5.0):
    """Yields (src, dst) int64 chunks.

    marius: sources uniform over N, destinations floor(N * u^skew) for uniform u (a power law
            in in-degree), then a seeded permutation of ids (the generated graph of the
            link-prediction issue uses skew 5).
    rmat:   recursive matrix (a=0.57, b=0.19, c=0.19, d=0.05), skewed in- and out-degrees."""
    if nodes < 2 or edges < 1:
        raise PrepError("a generated graph needs at least 2 nodes and 1 edge")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(nodes)
    levels = int(np.ceil(np.log2(nodes)))
    for start in range(0, edges, CHUNK):
        n = min(CHUNK, edges - start)
        if kind == "marius":
            src = rng.integers(0, nodes, n)
            dst = np.minimum((nodes * rng.random(n) ** skew).astype(np.int64), nodes - 1)
        elif kind == "rmat":
            src = np.zeros(n, dtype=np.int64)
            dst = np.zeros(n, dtype=np.int64)
            for _ in range(levels):
                u = rng.random(n)
                right = (u >= 0.57) & (u < 0.76) | (u >= 0.95)   # quadrants b and d
                down = u >= 0.76                                  # quadrants c and d
                src = src * 2 + down
                dst = dst * 2 + right
            src %= nodes
            dst %= nodes
        else:
            raise PrepError(f"unknown generator '{kind}' (expected marius or rmat)")
        yield perm[src], perm[dst]


def write_edge_list(out: str, kind: str, nodes: int, edges: int, seed: int,
                    relations: int = 0) -> pathlib.Path:
    """Writes a tab-separated edge list (to a temporary name, renamed when complete); with
    relations > 0 a third column names each edge's relation, r<dst mod relations>."""
    if relations < 0:
        raise PrepError(f"--relations must be 0 or more, got {relations}")
    path = pathlib.Path(out)
    tmp = path.with_name(path.name + ".tmp")
    progress = Progress(f"generating {path.name}", edges)
    with open(tmp, "w") as f:
        for src, dst in edge_chunks(kind, nodes, edges, seed):
            if relations > 0:
                rows = zip(src.tolist(), dst.tolist(), (dst % relations).tolist())
                f.write("\n".join(map("%d\t%d\tr%d".__mod__, rows)))
            else:
                f.write("\n".join(map("%d\t%d".__mod__, zip(src.tolist(), dst.tolist()))))
            f.write("\n")
            progress.add(len(src))
    progress.finish()
    tmp.rename(path)
    kinds = f", {relations} relations" if relations > 0 else ""
    print(f"wrote {path}: {nodes:,} nodes, {edges:,} edges{kinds}", file=sys.stderr)
    return path
