"""Generators of large synthetic graphs, streamed in chunks."""
from __future__ import annotations

import pathlib
import sys

import numpy as np

from .graph import Progress
from .writer import PrepError

CHUNK = 1 << 20


class Communities:
    """A degree-corrected block model: nodes in `count` communities of power-law sizes (contiguous
    before the final permutation), each with a Pareto weight (tail exponent 1.5: degrees follow
    a power law of exponent 2.5); both ends of an edge are drawn by weight, the destination
    inside the source's community except for a `mixing` fraction of edges, drawn by weight over
    all nodes. A self-loop draws its destination again, once."""

    def __init__(self, rng: np.random.Generator, nodes: int, count: int, mixing: float):
        if count < 1 or count > nodes:
            raise PrepError(f"--communities must be between 1 and the node count, got {count}")
        if not 0.0 <= mixing <= 1.0:
            raise PrepError(f"--mixing must be within [0, 1], got {mixing}")
        sizes = rng.pareto(1.5, count) + 1.0
        bounds = np.floor(np.cumsum(sizes) / sizes.sum() * nodes).astype(np.int64)
        bounds[-1] = nodes
        self.start = np.concatenate([[0], bounds[:-1]])
        self.end = np.maximum(bounds, self.start + 1)  # no empty community
        self.end = np.minimum(self.end, nodes)
        weight = rng.pareto(1.5, nodes) + 1.0
        self.cum = np.concatenate([[0.0], np.cumsum(weight)])
        self.mixing = mixing
        self.nodes = nodes

    def _draw(self, rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Nodes in [lo, hi) drawn by weight."""
        u = self.cum[lo] + rng.random(len(lo)) * (self.cum[hi] - self.cum[lo])
        return np.clip(np.searchsorted(self.cum, u, side="right") - 1, lo, hi - 1)

    def edges(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        zeros, full = np.zeros(n, dtype=np.int64), np.full(n, self.nodes, dtype=np.int64)
        src = self._draw(rng, zeros, full)
        c = np.searchsorted(self.start, src, side="right") - 1
        inside = rng.random(n) >= self.mixing
        lo = np.where(inside, self.start[c], 0)
        hi = np.where(inside, self.end[c], self.nodes)
        dst = self._draw(rng, lo, hi)
        loop = dst == src
        dst[loop] = self._draw(rng, lo[loop], hi[loop])
        return src, dst


def edge_chunks(kind: str, nodes: int, edges: int, seed: int, skew: float = 5.0,
                communities: int = 100, mixing: float = 0.1):
    """Yields (src, dst) int64 chunks.

    marius:    sources uniform over N, destinations floor(N * u^skew) for uniform u (a power law
               in in-degree), then a seeded permutation of ids (the generated graph of the
               link-prediction issue uses skew 5).
    rmat:      recursive matrix (a=0.57, b=0.19, c=0.19, d=0.05), skewed in- and out-degrees.
    community: power-law degrees and community structure (Communities), one relation."""
    if nodes < 2 or edges < 1:
        raise PrepError("a generated graph needs at least 2 nodes and 1 edge")
    rng = np.random.default_rng(seed)
    blocks = Communities(rng, nodes, communities, mixing) if kind == "community" else None
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
        elif kind == "community":
            src, dst = blocks.edges(rng, n)
        else:
            raise PrepError(f"unknown generator '{kind}' (expected marius, rmat or community)")
        yield perm[src], perm[dst]


class KnowledgeGraph:
    """A sparse knowledge graph shaped like WordNet's (many entities, few relations, two or
    three edges per entity), where a query's own entity is its hardest wrong answer.

    Entities form a forest: the first max(1, N / 1000) are roots; entity i > roots has parent
    floor(i * u^3) (u uniform), so early entities are hubs with power-law child counts.
    Relation r0 (40% of the edges, a "hypernym"): a child to its parent, for distinct children.
    Relation r1 (34%, "related", symmetric): sibling pairs (children of one parent), written
    both ways. Relations r2..r<R-1> share the remaining 26% in proportion to 1 / (k - 1): even k
    symmetric pairs of cousins (entities under one grandparent), odd k "domain" edges from an
    entity to one of 20 hubs of the relation, the hub fixed by the entity's third ancestor.
    Self-loops and duplicate edges are dropped, so a graph has at most `edges` edges."""

    def __init__(self, rng: np.random.Generator, nodes: int, relations: int):
        if relations < 2:
            raise PrepError(f"--kind kg needs at least 2 relations, got {relations}")
        self.nodes, self.relations = nodes, relations
        self.roots = max(1, nodes // 1000)
        i = np.arange(nodes)
        parent = np.minimum((i * rng.random(nodes) ** 3).astype(np.int64), np.maximum(i - 1, 0))
        parent[: self.roots] = i[: self.roots]  # a root is its own parent
        self.parent = parent
        self.grand = parent[parent]
        self.anc3 = parent[self.grand]
        # Entities grouped by parent and by grandparent: [start, end) of each group in `by_*`.
        self.groups = {}
        for name, key in (("parent", parent), ("grand", self.grand)):
            order = np.argsort(key, kind="stable")
            start = np.searchsorted(key[order], np.arange(nodes), side="left")
            end = np.searchsorted(key[order], np.arange(nodes), side="right")
            self.groups[name] = (order, start, end)
        self.hubs = rng.integers(0, nodes, (relations, 20))

    def _pairs(self, rng: np.random.Generator, group: str, count: int):
        """`count` pairs (a, b) with b drawn from a's group (a's siblings or cousins)."""
        order, start, end = self.groups[group]
        key = self.parent if group == "parent" else self.grand
        a = rng.integers(self.roots, self.nodes, count)
        lo, hi = start[key[a]], end[key[a]]
        b = order[lo + (rng.random(count) * (hi - lo)).astype(np.int64)]
        return a, b

    def edges(self, rng: np.random.Generator, n: int):
        """(src, dst, rel) of at most n distinct edges."""
        weight = np.array([0.40, 0.34] + [0.0] * (self.relations - 2))
        if self.relations > 2:
            tail = 1.0 / np.arange(1, self.relations - 1)
            weight[2:] = 0.26 * tail / tail.sum()
        else:
            weight[1] = 0.60
        counts = np.floor(weight * n).astype(np.int64)
        counts[0] += n - counts.sum()
        src, dst, rel = [], [], []
        children = rng.permutation(np.arange(self.roots, self.nodes))[: counts[0]]
        src.append(children)
        dst.append(self.parent[children])
        rel.append(np.zeros(len(children), np.int64))
        for k in range(1, self.relations):
            if k == 1 or k % 2 == 0:  # symmetric pairs, written both ways
                a, b = self._pairs(rng, "parent" if k == 1 else "grand", counts[k] // 2)
                src += [a, b]
                dst += [b, a]
                rel.append(np.full(2 * len(a), k, np.int64))
            else:  # domain edges to the relation's hubs
                a = rng.integers(0, self.nodes, counts[k])
                src.append(a)
                dst.append(self.hubs[k][self.anc3[a] % self.hubs.shape[1]])
                rel.append(np.full(len(a), k, np.int64))
        src, dst, rel = np.concatenate(src), np.concatenate(dst), np.concatenate(rel)
        keep = src != dst
        code = (src[keep] * self.relations + rel[keep]) * self.nodes + dst[keep]
        code = np.unique(code)  # sorted: shuffled again below
        code = code[rng.permutation(len(code))]
        dst = code % self.nodes
        rel = (code // self.nodes) % self.relations
        src = code // self.nodes // self.relations
        return src, dst, rel


def write_edge_list(out: str, kind: str, nodes: int, edges: int, seed: int,
                    relations: int = 0, communities: int = 100, mixing: float = 0.1) -> pathlib.Path:
    """Writes a tab-separated edge list (to a temporary name, renamed when complete); with
    relations > 0 a third column names each edge's relation, r<dst mod relations>."""
    if relations < 0:
        raise PrepError(f"--relations must be 0 or more, got {relations}")
    path = pathlib.Path(out)
    tmp = path.with_name(path.name + ".tmp")
    if kind == "kg":
        return _write_kg(path, tmp, nodes, edges, seed, relations or 11)
    progress = Progress(f"generating {path.name}", edges)
    with open(tmp, "w") as f:
        for src, dst in edge_chunks(kind, nodes, edges, seed, communities=communities, mixing=mixing):
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


def _write_kg(path: pathlib.Path, tmp: pathlib.Path, nodes: int, edges: int, seed: int,
              relations: int) -> pathlib.Path:
    """--kind kg: a KnowledgeGraph's edges in one piece (sparse graphs are small), ids permuted."""
    if nodes < 2 or edges < 1:
        raise PrepError("a generated graph needs at least 2 nodes and 1 edge")
    rng = np.random.default_rng(seed)
    src, dst, rel = KnowledgeGraph(rng, nodes, relations).edges(rng, edges)
    perm = rng.permutation(nodes)
    with open(tmp, "w") as f:
        for lo in range(0, len(src), CHUNK):
            rows = zip(perm[src[lo:lo + CHUNK]].tolist(), perm[dst[lo:lo + CHUNK]].tolist(),
                       rel[lo:lo + CHUNK].tolist())
            f.write("\n".join(map("%d\t%d\tr%d".__mod__, rows)))
            f.write("\n")
    tmp.rename(path)
    print(f"wrote {path}: {nodes:,} nodes, {len(src):,} edges ({edges - len(src):,} duplicates "
          f"or self-loops dropped), {relations} relations", file=sys.stderr)
    return path
