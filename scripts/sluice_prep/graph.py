"""Builds the graph part of a dataset from a stream of edge chunks, out of core.

Nodes are renumbered so each partition is a contiguous id range (random: a seeded permutation;
degree: by descending train degree, so hot rows cluster in the first partitions). Edges are
bucketed externally: one pass spills each chunk's edges into one scratch file per (split,
source partition) (and per destination partition for the destination-sorted copy of train);
then each partition file, a 1/p share of a split, is loaded, sorted and appended to the
output columns. Peak memory is about one chunk plus one partition of edges."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from .writer import DatasetWriter, PrepError

SPLITS = ("train", "valid", "test")


@dataclass
class EdgeChunk:
    """Edges with dense original ids in [0, num_nodes); rel/weight optional; one split."""
    split: str
    src: np.ndarray
    dst: np.ndarray
    rel: np.ndarray | None = None
    weight: np.ndarray | None = None


@dataclass
class GraphSpec:
    num_nodes: int
    num_relations: int = 1
    num_partitions: int = 1
    partitioning: str = "random"          # random | degree
    seed: int = 0
    has_rel: bool = False
    has_weight: bool = False
    dst_sorted_splits: tuple[str, ...] = ("train",)


class Progress:
    """A progress line on stderr, at most every half second."""

    def __init__(self, what: str, total: int | None = None):
        self.what, self.total, self.done = what, total, 0
        self.start = self.last = time.monotonic()

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= 0.5:
            self.last = now
            self.show()

    def show(self, end: str = "") -> None:
        rate = self.done / max(time.monotonic() - self.start, 1e-9)
        total = f"/{self.total:,}" if self.total else ""
        print(f"\r{self.what}: {self.done:,}{total} ({rate:,.0f}/s){end}", end="", file=sys.stderr,
              flush=True)

    def finish(self) -> float:
        self.show(end="\n")
        return self.done / max(time.monotonic() - self.start, 1e-9)


def id_dtype(num_nodes: int) -> np.dtype:
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def partition_bounds(n: int, p: int) -> np.ndarray:
    return np.array([k * n // p for k in range(p + 1)], dtype=np.int64)


def renumbering(spec: GraphSpec, train_degree: np.ndarray | None) -> np.ndarray:
    """new_id[old_id]."""
    rng = np.random.default_rng(spec.seed)
    if spec.partitioning == "random":
        order = rng.permutation(spec.num_nodes)
    elif spec.partitioning == "degree":
        # Descending degree; ties broken by a seeded shuffle so partitions stay balanced.
        shuffled = rng.permutation(spec.num_nodes)
        order = shuffled[np.argsort(-train_degree[shuffled], kind="stable")]
    else:
        raise PrepError(f"unknown partitioning '{spec.partitioning}' (expected random or degree)")
    new_id = np.empty(spec.num_nodes, dtype=np.int64)
    new_id[order] = np.arange(spec.num_nodes, dtype=np.int64)
    return new_id


def _check_ids(chunk: EdgeChunk, spec: GraphSpec) -> None:
    for name, ids in (("source", chunk.src), ("destination", chunk.dst)):
        if ids.size and (ids.min() < 0 or ids.max() >= spec.num_nodes):
            bad = ids[(ids < 0) | (ids >= spec.num_nodes)][0]
            raise PrepError(f"{chunk.split} edge {name} id {bad} is out of range "
                            f"[0, {spec.num_nodes})")
    if chunk.rel is not None and chunk.rel.size and (
            chunk.rel.min() < 0 or chunk.rel.max() >= spec.num_relations):
        raise PrepError(f"{chunk.split} edge relation id out of range [0, {spec.num_relations})")


class _Spill:
    """Per-partition scratch files of edge records."""

    def __init__(self, writer: DatasetWriter, name: str, p: int, dtype: np.dtype):
        self.paths = [writer.scratch(f"{name}.{k}") for k in range(p)]
        self.files = [open(path, "wb") for path in self.paths]
        self.dtype = dtype

    def add(self, part: np.ndarray, records: np.ndarray) -> None:
        # A stable sort of small integers is a radix sort in numpy.
        small = part.astype(np.int16 if len(self.files) < 2**15 else np.int32)
        order = np.argsort(small, kind="stable")
        part, records = part[order], records[order]
        cuts = np.searchsorted(part, np.arange(len(self.files) + 1))
        for k, f in enumerate(self.files):
            if cuts[k] < cuts[k + 1]:
                f.write(records[cuts[k]:cuts[k + 1]].tobytes())

    def load(self, k: int) -> np.ndarray:
        self.files[k].close()
        records = np.fromfile(self.paths[k], dtype=self.dtype)
        self.paths[k].unlink()
        return records


@dataclass
class GraphResult:
    edges: dict[str, int] = field(default_factory=dict)
    bounds: np.ndarray | None = None
    new_id: np.ndarray | None = None
    out_degree: np.ndarray | None = None
    in_degree: np.ndarray | None = None
    edges_per_second: float = 0.0


def build_graph(writer: DatasetWriter, spec: GraphSpec,
                chunks: Callable[[], Iterable[EdgeChunk]], total_edges: int | None = None
                ) -> GraphResult:
    """Writes edges.* and nodes.*_degree roles. `chunks` is called once or twice (degree
    partitioning reads the edges twice)."""
    n, p = spec.num_nodes, spec.num_partitions
    if p < 1 or p > max(n, 1):
        raise PrepError(f"--partitions {p} must be in [1, {max(n, 1)}] (at most one partition a node)")
    train_degree = None
    if spec.partitioning == "degree":
        train_degree = np.zeros(n, dtype=np.int64)
        progress = Progress("counting degrees", total_edges)
        for c in chunks():
            _check_ids(c, spec)
            if c.split == "train":
                train_degree += np.bincount(c.src, minlength=n) + np.bincount(c.dst, minlength=n)
            progress.add(len(c.src))
        progress.finish()
    new_id = renumbering(spec, train_degree)
    bounds = partition_bounds(n, p)
    idt = id_dtype(n)
    fields = [("src", idt), ("dst", idt)]
    if spec.has_rel:
        fields.append(("rel", np.int32))
    if spec.has_weight:
        fields.append(("weight", np.float32))
    rec = np.dtype(fields)
    by_src = {s: _Spill(writer, f"{s}.src", p, rec) for s in SPLITS}
    by_dst = {s: _Spill(writer, f"{s}.dst", p, rec) for s in spec.dst_sorted_splits}
    result = GraphResult(bounds=bounds, new_id=new_id,
                         out_degree=np.zeros(n, dtype=np.int64), in_degree=np.zeros(n, dtype=np.int64))
    counts = {s: 0 for s in SPLITS}
    progress = Progress("bucketing edges", total_edges)
    for c in chunks():
        if c.split not in by_src:
            raise PrepError(f"unknown split '{c.split}'")
        _check_ids(c, spec)
        records = np.empty(len(c.src), dtype=rec)
        records["src"], records["dst"] = new_id[c.src], new_id[c.dst]
        if spec.has_rel:
            records["rel"] = c.rel
        if spec.has_weight:
            records["weight"] = c.weight
        src_part = np.searchsorted(bounds, records["src"], side="right") - 1
        by_src[c.split].add(src_part, records)
        if c.split in by_dst:
            by_dst[c.split].add(np.searchsorted(bounds, records["dst"], side="right") - 1, records)
        if c.split == "train":
            result.out_degree += np.bincount(records["src"], minlength=n)
            result.in_degree += np.bincount(records["dst"], minlength=n)
        counts[c.split] += len(records)
        progress.add(len(records))
    result.edges_per_second = progress.finish()
    for s in SPLITS:
        if counts[s] == 0 and s != "train":
            for k in range(p):
                by_src[s].load(k)
            continue
        _write_buckets(writer, f"edges.{s}", f"edges/{s}", by_src[s], bounds, spec, "src", "dst")
        if s in by_dst:
            _write_buckets(writer, f"edges.{s}.by_dst", f"edges/{s}_by_dst", by_dst[s], bounds,
                           spec, "dst", "src")
        result.edges[s] = counts[s]
    return result


def _write_buckets(writer: DatasetWriter, role: str, rel: str, spill: _Spill,
                   bounds: np.ndarray, spec: GraphSpec, major: str, minor: str) -> None:
    """Bucket (i, j) of the `major` partition i and `minor` partition j, sorted by
    (major id, minor id, rel)."""
    p = len(bounds) - 1
    idt = id_dtype(spec.num_nodes)
    cols = {name: writer.array(f"{role}.{name}", f"{rel}_{name}.bin", dt) for name, dt in
            (("src", idt), ("dst", idt)) + ((("rel", np.int32),) if spec.has_rel else ()) +
            ((("weight", np.float32),) if spec.has_weight else ())}
    offsets = np.zeros(p * p + 1, dtype=np.int64)
    done = 0
    for i in range(p):
        records = spill.load(i)
        minor_part = np.searchsorted(bounds, records[minor], side="right") - 1
        keys = [records[minor], records[major], minor_part]
        if spec.has_rel:
            keys.insert(0, records["rel"])
        records = records[np.lexsort(keys)]
        per_bucket = np.bincount(minor_part, minlength=p)
        offsets[i * p + 1:(i + 1) * p + 1] = done + np.cumsum(per_bucket)
        done += len(records)
        for name, f in cols.items():
            f.append(records[name])
    writer.put(f"{role}.buckets", f"{rel}_buckets.bin", offsets, np.int64)


def degree_stats(out_degree: np.ndarray, in_degree: np.ndarray) -> dict:
    deg = out_degree + in_degree
    if deg.size == 0:
        return {}
    top = np.sort(deg)[::-1][: max(1, deg.size // 100)]
    return {
        "degree": {"min": int(deg.min()), "median": float(np.median(deg)),
                   "mean": float(deg.mean()), "p99": float(np.percentile(deg, 99)),
                   "max": int(deg.max())},
        "isolated_nodes": int((deg == 0).sum()),
        "top1pct_degree_share": float(top.sum() / max(deg.sum(), 1)),
    }


def write_names(writer: DatasetWriter, role: str, rel: str, names: list[str],
                order: np.ndarray | None = None) -> None:
    """A string table: names[k] (or names[order[k]]) as UTF-8 with int64 offsets."""
    if order is not None:
        names = [names[i] for i in order]
    encoded = [s.encode("utf-8") for s in names]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(e) for e in encoded])
    writer.put(f"{role}.offsets", f"{rel}_offsets.bin", offsets, np.int64)
    writer.put(f"{role}.bytes", f"{rel}_bytes.bin", np.frombuffer(b"".join(encoded), np.uint8),
               np.uint8)

