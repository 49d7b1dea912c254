"""Node-classification datasets: the shared writer, OGB-style raw folders, .npy features with
an edge list, and a generated graph whose labels depend on structure and features."""
from __future__ import annotations

import gzip
import pathlib
from typing import Callable, Iterable

import numpy as np

from .graph import EdgeChunk, GraphSpec, Progress, build_graph, degree_stats
from .writer import DatasetWriter, PrepError


def write_node_classification(out: str, name: str, num_nodes: int,
                              edges: Callable[[], Iterable[EdgeChunk]], num_edges: int | None,
                              features: np.ndarray, labels: np.ndarray,
                              splits: dict[str, np.ndarray], num_classes: int, partitions: int,
                              partitioning: str, seed: int, feature_dtype: str, overwrite: bool,
                              stats: dict | None = None) -> pathlib.Path:
    if features.ndim != 2 or len(features) != num_nodes:
        raise PrepError(f"features have shape {features.shape}, expected ({num_nodes}, F)")
    if len(labels) != num_nodes:
        raise PrepError(f"{len(labels)} labels for {num_nodes} nodes")
    if labels.size and (labels.max() >= num_classes or labels.min() < -1):
        raise PrepError(f"labels must be in [-1, {num_classes}) (-1: unlabelled)")
    for split, ids in splits.items():
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            raise PrepError(f"{split} split names node {ids.max()}, out of range [0, {num_nodes})")
    spec = GraphSpec(num_nodes=num_nodes, num_partitions=partitions, partitioning=partitioning,
                     seed=seed)
    writer = DatasetWriter(out, overwrite)
    try:
        g = build_graph(writer, spec, edges, num_edges)
        order = np.argsort(g.new_id)
        fdt = np.float16 if feature_dtype == "float16" else np.float32
        feat = writer.array("nodes.features", "nodes/features.bin", fdt, features.shape[1])
        for start in range(0, num_nodes, 1 << 16):  # features may be a memmap: copy in pieces
            rows = order[start:start + (1 << 16)]
            piece = np.asarray(features[rows], dtype=fdt)
            bad = ~np.isfinite(piece)
            if bad.any():
                r, c = np.argwhere(bad)[0]
                raise PrepError(f"node {int(rows[r])}: feature {int(c)} is {piece[r, c]} (not finite; "
                                "features must be finite numbers)")
            feat.append(piece)
        writer.put("nodes.labels", "nodes/labels.bin", labels[order], np.int32)
        for split, ids in splits.items():
            writer.put(f"nodes.{split}", f"nodes/{split}.bin", np.sort(g.new_id[ids]), np.int64)
        writer.put("nodes.original_ids", "nodes/original_ids.bin", order, np.int64)
        writer.put("nodes.out_degree", "nodes/out_degree.bin", g.out_degree, np.int64)
        writer.put("nodes.in_degree", "nodes/in_degree.bin", g.in_degree, np.int64)
        return writer.commit({
            "task": "node_classification", "name": name,
            "counts": {"nodes": num_nodes, "relations": 1, "feature_dim": int(features.shape[1]),
                       "classes": num_classes, "edges": g.edges, "samples": {}},
            "partitions": {"count": partitions, "bounds": g.bounds.tolist(),
                           "method": partitioning, "seed": seed},
            "stats": {**degree_stats(g.out_degree, g.in_degree),
                      "split_sizes": {s: int(len(v)) for s, v in splits.items()},
                      **(stats or {})},
        })
    except BaseException:
        writer.abort()
        raise


def _read_table(path: pathlib.Path, dtype, width: int | None = None) -> np.ndarray:
    """A CSV(.gz) of numbers; every row must have the same width (errors name file:line)."""
    if not path.exists():
        raise PrepError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            fields = line.split(",")
            if width is None:
                width = len(fields)
            if len(fields) != width:
                raise PrepError(f"{path}:{number}: {len(fields)} values, expected {width} "
                                "(rows must all have the same width)")
            try:
                rows.append([dtype(x) for x in fields])
            except ValueError:
                raise PrepError(f"{path}:{number}: not a number in '{line[:60]}'") from None
    return np.array(rows, dtype=np.float64 if dtype is float else np.int64).reshape(-1, width or 1)


def _find(root: pathlib.Path, stem: str) -> pathlib.Path:
    for candidate in (root / f"{stem}.csv.gz", root / f"{stem}.csv"):
        if candidate.exists():
            return candidate
    raise PrepError(f"{root}: no {stem}.csv[.gz]")


def convert_ogb(root: str, out: str, partitions: int, partitioning: str, seed: int,
                feature_dtype: str, overwrite: bool, name: str | None) -> pathlib.Path:
    """An OGB node-property folder: raw/edge.csv(.gz), raw/node-feat.csv(.gz),
    raw/node-label.csv(.gz), split/<scheme>/{train,valid,test}.csv(.gz)."""
    base = pathlib.Path(root)
    raw = base / "raw" if (base / "raw").exists() else base
    edges = _read_table(_find(raw, "edge"), int, 2)
    features = _read_table(_find(raw, "node-feat"), float).astype(np.float32)
    labels = _read_table(_find(raw, "node-label"), float, 1)[:, 0]
    labels = np.where(np.isnan(labels), -1, labels).astype(np.int64)
    n = len(features)
    if len(labels) != n:
        raise PrepError(f"{raw}: node-feat has {n} rows but node-label has {len(labels)}")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise PrepError(f"{raw}: edge.csv names node {edges.max()}, out of range [0, {n})")
    schemes = sorted(p for p in (base / "split").glob("*") if p.is_dir()) if (base / "split").exists() else []
    if not schemes:
        raise PrepError(f"{base}: no split/<scheme>/ folder")
    splits = {s: _read_table(_find(schemes[0], s), int, 1)[:, 0] for s in ("train", "valid", "test")}
    src, dst = edges[:, 0], edges[:, 1]
    return write_node_classification(
        out, name or base.name, n, lambda: [EdgeChunk("train", src, dst)], len(src), features,
        labels, splits, int(labels.max()) + 1, partitions, partitioning, seed, feature_dtype,
        overwrite, {"split_scheme": schemes[0].name})


def convert_npy(edges_path: str, features_path: str, labels_path: str, out: str, valid_frac: float,
                test_frac: float, partitions: int, partitioning: str, seed: int,
                feature_dtype: str, overwrite: bool, name: str | None) -> pathlib.Path:
    """Features (N x F .npy, memory-mapped) and labels (N .npy) with an edge list of ids in
    [0, N) (whitespace or comma separated); splits by seeded ratio."""
    features = np.load(features_path, mmap_mode="r")
    labels = np.load(labels_path).astype(np.int64)
    if features.ndim != 2:
        raise PrepError(f"{features_path}: features must be 2-D, got shape {features.shape}")
    if len(labels) != len(features):
        raise PrepError(f"{labels_path} has {len(labels)} rows but {features_path} has {len(features)}")
    n = len(features)
    text = pathlib.Path(edges_path).read_text().replace(",", " ").split("\n")
    pairs = []
    for number, line in enumerate(text, 1):
        fields = line.split()
        if not fields or line.lstrip().startswith("#"):
            continue
        if len(fields) < 2 or not fields[0].lstrip("-").isdigit() or not fields[1].lstrip("-").isdigit():
            raise PrepError(f"{edges_path}:{number}: expected two integer node ids")
        pairs.append((int(fields[0]), int(fields[1])))
    e = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    if e.size and (e.min() < 0 or e.max() >= n):
        bad = e[(e < 0) | (e >= n)][0]
        raise PrepError(f"{edges_path}: node id {bad} is out of range [0, {n}) (features have {n} rows)")
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    splits = {"train": np.flatnonzero(u >= valid_frac + test_frac),
              "valid": np.flatnonzero((u >= test_frac) & (u < valid_frac + test_frac)),
              "test": np.flatnonzero(u < test_frac)}
    return write_node_classification(
        out, name or pathlib.Path(features_path).stem, n,
        lambda: [EdgeChunk("train", e[:, 0], e[:, 1])], len(e), features, labels, splits,
        int(labels.max()) + 1, partitions, partitioning, seed, feature_dtype, overwrite)


def generate_node_classification(out: str, nodes: int, edges: int, features: int, classes: int,
                                 homophily: float, noise: float, partitions: int,
                                 partitioning: str, seed: int, overwrite: bool,
                                 feature_dtype: str = "float32") -> pathlib.Path:
    """A power-law graph with planted classes: each node has a class; an edge's destination is
    drawn (with a power law over nodes) from the source's class with probability `homophily`,
    else from anywhere; features are the class centroid plus Gaussian noise. So both features
    and neighbours carry the label, and accuracy measures learning."""
    if classes < 2 or nodes < classes or not 0 <= homophily <= 1:
        raise PrepError("gen-nc needs classes >= 2, nodes >= classes and homophily in [0, 1]")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, nodes)
    by_class = [np.flatnonzero(labels == c) for c in range(classes)]
    centroids = rng.normal(0, 1, (classes, features))
    feats = (centroids[labels] + rng.normal(0, noise, (nodes, features))).astype(np.float32)

    def chunks():
        r = np.random.default_rng(seed + 1)
        for start in range(0, edges, 1 << 20):
            k = min(1 << 20, edges - start)
            src = r.integers(0, nodes, k)
            dst = np.minimum((nodes * r.random(k) ** 3).astype(np.int64), nodes - 1)
            same = r.random(k) < homophily
            for c in range(classes):
                m = same & (labels[src] == c)
                members = by_class[c]
                dst[m] = members[np.minimum((len(members) * r.random(m.sum()) ** 3).astype(np.int64),
                                            len(members) - 1)]
            keep = src != dst
            yield EdgeChunk("train", src[keep], dst[keep])

    u = rng.random(nodes)
    splits = {"train": np.flatnonzero(u >= 0.2), "valid": np.flatnonzero((u >= 0.1) & (u < 0.2)),
              "test": np.flatnonzero(u < 0.1)}
    return write_node_classification(out, "generated-nc", nodes, chunks, edges, feats, labels, splits,
                                     classes, partitions, partitioning, seed, feature_dtype, overwrite,
                                     {"homophily": homophily, "feature_noise": noise})
