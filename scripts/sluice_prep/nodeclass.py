"""Node-classification datasets: the shared writer, OGB-style raw folders, .npy features with
an edge list, and a generated graph whose labels depend on structure and features."""
from __future__ import annotations

import gzip
import itertools
import pathlib
from typing import Callable, Iterable

import numpy as np

from .graph import EdgeChunk, GraphSpec, Progress, build_graph, degree_stats
from .keyed import mix as _mix
from .writer import DatasetWriter, PrepError


class FeatureSource:
    """Feature rows by original id, produced on demand (rows(ids) -> [len(ids), width]); an
    array or memmap is wrapped as one, so features are only ever read in pieces."""

    def __init__(self, width: int, rows: Callable[[np.ndarray], np.ndarray], count: int | None = None):
        self.width, self.rows, self.count = width, rows, count

    @staticmethod
    def of(features) -> "FeatureSource":
        if isinstance(features, FeatureSource):
            return features
        if features.ndim != 2:
            raise PrepError(f"features have shape {features.shape}, expected (N, F)")
        return FeatureSource(features.shape[1], lambda ids: features[ids], len(features))


def write_node_classification(out: str, name: str, num_nodes: int,
                              edges: Callable[[], Iterable[EdgeChunk]], num_edges: int | None,
                              features, labels: np.ndarray,
                              splits: dict[str, np.ndarray], num_classes: int, partitions: int,
                              partitioning: str, seed: int, feature_dtype: str, overwrite: bool,
                              stats: dict | None = None) -> pathlib.Path:
    features = FeatureSource.of(features)
    if features.count is not None and features.count != num_nodes:
        raise PrepError(f"features have {features.count} rows, expected {num_nodes}")
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
        order = np.empty(num_nodes, dtype=np.int64)  # original id of each new id
        order[g.new_id] = np.arange(num_nodes, dtype=np.int64)
        fdt = np.float16 if feature_dtype == "float16" else np.float32
        feat = writer.array("nodes.features", "nodes/features.bin", fdt, features.width)
        progress = Progress("writing features", num_nodes)
        for start in range(0, num_nodes, 1 << 15):  # in pieces: features may be a memmap
            rows = order[start:start + (1 << 15)]
            piece = np.asarray(features.rows(rows), dtype=fdt)
            bad = ~np.isfinite(piece)
            if bad.any():
                r, c = np.argwhere(bad)[0]
                raise PrepError(f"node {int(rows[r])}: feature {int(c)} is {piece[r, c]} (not finite; "
                                "features must be finite numbers)")
            feat.append(piece)
            progress.add(len(rows))
        progress.finish()
        new_labels = np.empty(num_nodes, dtype=np.int32)
        new_labels[g.new_id] = labels
        writer.put("nodes.labels", "nodes/labels.bin", new_labels, np.int32)
        del new_labels
        for split, ids in splits.items():
            writer.put(f"nodes.{split}", f"nodes/{split}.bin", np.sort(g.new_id[ids]), np.int64)
        writer.put("nodes.original_ids", "nodes/original_ids.bin", order, np.int64)
        del order
        writer.put("nodes.out_degree", "nodes/out_degree.bin", g.out_degree, np.int64)
        writer.put("nodes.in_degree", "nodes/in_degree.bin", g.in_degree, np.int64)
        return writer.commit({
            "task": "node_classification", "name": name,
            "counts": {"nodes": num_nodes, "relations": 1, "feature_dim": int(features.width),
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


CHUNK_LINES = 1 << 20


def _open(path: pathlib.Path):
    if not path.exists():
        raise PrepError(f"{path}: no such file")
    return gzip.open(path, "rt") if path.suffix == ".gz" else open(path, "rt")


def _bad_line(path: pathlib.Path, block: list[str], first: int, dtype, width: int | None,
              sep: str | None, comment: str | None, usecols: tuple[int, ...] | None) -> PrepError:
    """The error for the first malformed line of a block that numpy could not parse."""
    for k, line in enumerate(block):
        if not line.strip() or (comment and line.lstrip().startswith(comment)):
            continue
        fields = line.strip().split(sep) if sep else line.split()
        if usecols is not None:
            if len(fields) <= max(usecols):
                return PrepError(f"{path}:{first + k}: {len(fields)} values, expected at least "
                                 f"{max(usecols) + 1}")
            fields = [fields[c] for c in usecols]
        else:
            width = len(fields) if width is None else width
            if len(fields) != width:
                return PrepError(f"{path}:{first + k}: {len(fields)} values, expected {width} "
                                 "(rows must all have the same width)")
        try:
            [dtype(x) for x in fields]
        except ValueError:
            return PrepError(f"{path}:{first + k}: not a number in '{line.strip()[:60]}'")
    return PrepError(f"{path}:{first}-{first + len(block) - 1}: unreadable numbers")


def table_chunks(path: pathlib.Path, dtype, width: int | None = None, sep: str | None = ",",
                 comment: str | None = None, usecols: tuple[int, ...] | None = None):
    """A text table of numbers (CSV or whitespace, .gz or plain) in pieces of CHUNK_LINES lines:
    [k, width] arrays (int64 for int, float64 for float). Every row must have the same width;
    errors name file:line. Memory is one piece, whatever the file's size."""
    out_dtype = np.float64 if dtype is float else np.int64
    with _open(path) as f:
        number = 0
        while True:
            block = list(itertools.islice(f, CHUNK_LINES))
            if not block:
                return
            first, number = number + 1, number + len(block)
            rows = [line for line in block if line.strip() and not (comment and line.lstrip().startswith(comment))]
            if not rows:
                continue
            try:
                arr = np.loadtxt(rows, dtype=out_dtype, delimiter=sep, ndmin=2, usecols=usecols)
            except ValueError:
                raise _bad_line(path, block, first, dtype, width, sep, comment, usecols) from None
            if width is None:
                width = arr.shape[1]
            if arr.shape[1] != width:
                raise _bad_line(path, block, first, dtype, width, sep, comment, usecols)
            yield arr


def _read_table(path: pathlib.Path, dtype, width: int | None = None) -> np.ndarray:
    """A whole (small) CSV(.gz) table of numbers."""
    pieces = list(table_chunks(path, dtype, width))
    out_dtype = np.float64 if dtype is float else np.int64
    return np.concatenate(pieces) if pieces else np.zeros((0, width or 1), dtype=out_dtype)


def _find(root: pathlib.Path, stem: str) -> pathlib.Path:
    for candidate in (root / f"{stem}.csv.gz", root / f"{stem}.csv"):
        if candidate.exists():
            return candidate
    raise PrepError(f"{root}: no {stem}.csv[.gz]")


def _edge_chunks(path: pathlib.Path, n: int, sep: str | None, comment: str | None,
                 what: str) -> Callable[[], Iterable[EdgeChunk]]:
    """Edges of a text file, read in pieces each time the graph builder asks."""
    def chunks():
        for e in table_chunks(path, int, None if comment else 2, sep, comment,
                              (0, 1) if comment else None):
            if e.size and (e.min() < 0 or e.max() >= n):
                bad = e[(e < 0) | (e >= n)][0]
                raise PrepError(f"{path}: node id {bad} is out of range [0, {n}) ({what})")
            yield EdgeChunk("train", e[:, 0], e[:, 1])
    return chunks


def convert_ogb(root: str, out: str, partitions: int, partitioning: str, seed: int,
                feature_dtype: str, overwrite: bool, name: str | None) -> pathlib.Path:
    """An OGB node-property folder: raw/edge.csv(.gz), raw/node-feat.csv(.gz),
    raw/node-label.csv(.gz), split/<scheme>/{train,valid,test}.csv(.gz). Features and edges are
    read in pieces (features through a scratch file beside the output)."""
    import tempfile
    base = pathlib.Path(root)
    raw = base / "raw" if (base / "raw").exists() else base
    labels = _read_table(_find(raw, "node-label"), float, 1)[:, 0]
    labels = np.where(np.isnan(labels), -1, labels).astype(np.int64)
    schemes = sorted(p for p in (base / "split").glob("*") if p.is_dir()) if (base / "split").exists() else []
    if not schemes:
        raise PrepError(f"{base}: no split/<scheme>/ folder")
    splits = {s: _read_table(_find(schemes[0], s), int, 1)[:, 0] for s in ("train", "valid", "test")}
    parent = pathlib.Path(out).resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".sluice-prep-") as scratch:
        feat_path, n, width = pathlib.Path(scratch) / "features.f32", 0, None
        with open(feat_path, "wb") as f:
            for piece in table_chunks(_find(raw, "node-feat"), float):
                width = piece.shape[1]
                f.write(piece.astype(np.float32).tobytes())
                n += len(piece)
        features = np.memmap(feat_path, dtype=np.float32, mode="r", shape=(n, width or 0)) if n else \
            np.zeros((0, 0), np.float32)
        if len(labels) != n:
            raise PrepError(f"{raw}: node-feat has {n} rows but node-label has {len(labels)}")
        edges = _edge_chunks(_find(raw, "edge"), n, ",", None, "edge.csv")
        return write_node_classification(
            out, name or base.name, n, edges, None, features, labels, splits,
            int(labels.max()) + 1, partitions, partitioning, seed, feature_dtype, overwrite,
            {"split_scheme": schemes[0].name})


def convert_npy(edges_path: str, features_path: str, labels_path: str, out: str, valid_frac: float,
                test_frac: float, partitions: int, partitioning: str, seed: int,
                feature_dtype: str, overwrite: bool, name: str | None) -> pathlib.Path:
    """Features (N x F .npy, memory-mapped) and labels (N .npy) with an edge list of ids in
    [0, N) (whitespace or comma separated, '#' comments), read in pieces; splits by seeded
    ratio."""
    features = np.load(features_path, mmap_mode="r")
    labels = np.load(labels_path).astype(np.int64)
    if features.ndim != 2:
        raise PrepError(f"{features_path}: features must be 2-D, got shape {features.shape}")
    if len(labels) != len(features):
        raise PrepError(f"{labels_path} has {len(labels)} rows but {features_path} has {len(features)}")
    n = len(features)
    path = pathlib.Path(edges_path)
    with _open(path) as f:
        sep = "," if "," in f.readline() else None
    edges = _edge_chunks(path, n, sep, "#", "features have " + str(n) + " rows")
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    splits = {"train": np.flatnonzero(u >= valid_frac + test_frac),
              "valid": np.flatnonzero((u >= test_frac) & (u < valid_frac + test_frac)),
              "test": np.flatnonzero(u < test_frac)}
    return write_node_classification(
        out, name or pathlib.Path(features_path).stem, n, edges, None, features, labels, splits,
        int(labels.max()) + 1, partitions, partitioning, seed, feature_dtype, overwrite)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def keyed_uniform(seed: int, stream: int, ids: np.ndarray, width: int = 1) -> np.ndarray:
    """[len(ids), width] uniforms in (0, 1), each a pure function of (seed, stream, id, column):
    the same values whatever the chunking or the node count."""
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN + np.uint64(stream))
    row = _mix(ids.astype(np.uint64) ^ key)
    with np.errstate(over="ignore"):
        cols = (np.arange(1, width + 1, dtype=np.uint64) * _GOLDEN)[None, :]
        bits = _mix(row[:, None] + cols)
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def keyed_normal(seed: int, stream: int, ids: np.ndarray, width: int) -> np.ndarray:
    """[len(ids), width] standard normals keyed like keyed_uniform (Box-Muller)."""
    half = (width + 1) // 2
    u = keyed_uniform(seed, stream, ids, 2 * half)
    r = np.sqrt(-2.0 * np.log(u[:, :half]))
    angle = 2.0 * np.pi * u[:, half:]
    return np.concatenate([r * np.cos(angle), r * np.sin(angle)], axis=1)[:, :width]


class PlantedClasses:
    """The planted model of gen-nc, every part a pure function of (seed, original id): a node's
    class, its split, and its feature row (its class centroid plus Gaussian noise)."""

    def __init__(self, seed: int, classes: int, features: int, noise: float):
        self.seed, self.classes, self.features, self.noise = seed, classes, features, noise
        self.centroids = np.random.default_rng(seed).normal(0, 1, (classes, features))

    def labels(self, ids: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            key = _mix(np.uint64(self.seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN + np.uint64(7))
        return (_mix(ids.astype(np.uint64) ^ key) % np.uint64(self.classes)).astype(np.int64)

    def split_draw(self, ids: np.ndarray) -> np.ndarray:
        return keyed_uniform(self.seed, 1, ids)[:, 0]

    def rows(self, ids: np.ndarray) -> np.ndarray:
        noise = keyed_normal(self.seed, 2, ids, self.features)
        return (self.centroids[self.labels(ids)] + self.noise * noise).astype(np.float32)


def generate_node_classification(out: str, nodes: int, edges: int, features: int, classes: int,
                                 homophily: float, noise: float, partitions: int,
                                 partitioning: str, seed: int, overwrite: bool,
                                 feature_dtype: str = "float32", train_frac: float = 0.8,
                                 valid_frac: float = 0.1, test_frac: float = 0.1,
                                 undirected: bool = False) -> pathlib.Path:
    """A power-law graph with planted classes: each node has a class; an edge's destination is
    drawn (with a power law over nodes) from the source's class with probability `homophily`,
    else from anywhere; features are the class centroid plus Gaussian noise. So both features
    and neighbours carry the label, and accuracy measures learning. Undirected: every edge is
    stored in both directions. Edges are generated in chunks and feature rows written in chunks
    (each a pure function of seed and original id), so memory stays at a few arrays of N."""
    if classes < 2 or nodes < classes or not 0 <= homophily <= 1:
        raise PrepError("gen-nc needs classes >= 2, nodes >= classes and homophily in [0, 1]")
    fracs = (train_frac, valid_frac, test_frac)
    if min(fracs) < 0 or sum(fracs) > 1 + 1e-12 or train_frac <= 0:
        raise PrepError(f"split fractions {fracs} must be >= 0 with a positive train fraction "
                        "and sum to at most 1")
    planted = PlantedClasses(seed, classes, features, noise)
    ids = np.arange(nodes, dtype=np.int64)
    labels = planted.labels(ids)
    u = planted.split_draw(ids)
    del ids
    a, b = train_frac, train_frac + valid_frac
    splits = {"train": np.flatnonzero(u < a), "valid": np.flatnonzero((u >= a) & (u < b)),
              "test": np.flatnonzero((u >= b) & (u < b + test_frac))}
    del u
    by_class = [np.flatnonzero(labels == c) for c in range(classes)]

    def chunks():
        r = np.random.default_rng(seed + 1)
        for start in range(0, edges, 1 << 20):
            k = min(1 << 20, edges - start)
            src = r.integers(0, nodes, k)
            dst = np.minimum((nodes * r.random(k) ** 3).astype(np.int64), nodes - 1)
            same = r.random(k) < homophily
            src_class = labels[src]
            for c in range(classes):
                m = same & (src_class == c)
                members = by_class[c]
                dst[m] = members[np.minimum((len(members) * r.random(m.sum()) ** 3).astype(np.int64),
                                            len(members) - 1)]
            keep = src != dst
            src, dst = src[keep], dst[keep]
            if undirected:
                src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            yield EdgeChunk("train", src, dst)

    if not all(len(v) for v in splits.values()):
        raise PrepError(f"a split is empty with {nodes} nodes and fractions {fracs}")
    return write_node_classification(
        out, "generated-nc", nodes, chunks, edges * (2 if undirected else 1),
        FeatureSource(features, planted.rows), labels, splits, classes, partitions, partitioning,
        seed, feature_dtype, overwrite,
        {"homophily": homophily, "feature_noise": noise, "undirected": undirected})
