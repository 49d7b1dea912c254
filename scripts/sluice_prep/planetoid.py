"""Planetoid node-classification files (ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}),
loaded with a restricted unpickler that admits only the array, sparse-matrix and container
types these files hold, never arbitrary objects. Recipe as in PyG's Planetoid: features =
allx stacked on tx with the test rows reordered; CiteSeer's test index has gaps (isolated nodes
without features), padded with zero features and label -1 (unlabelled)."""
from __future__ import annotations

import pathlib
import pickle
import tempfile

import numpy as np

from .graph import EdgeChunk
from .nodeclass import write_node_classification
from .textio import lines
from .writer import PrepError

ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"), ("scipy.sparse.csr", "csr_matrix"),
    ("scipy.sparse._csr", "csr_matrix"), ("collections", "defaultdict"), ("builtins", "list"),
    ("builtins", "dict"), ("builtins", "int"),
    # Python 2 names (mapped to builtins by pickle's fix_imports after this check).
    ("__builtin__", "list"), ("__builtin__", "dict"), ("__builtin__", "int"),
}


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED:
            raise PrepError(f"refusing to unpickle {module}.{name}: not an array, sparse matrix "
                            "or container type a Planetoid file holds")
        return super().find_class(module, name)


def load_pickle(path: pathlib.Path):
    if not path.exists():
        raise PrepError(f"{path}: no such file")
    with open(path, "rb") as f:
        try:
            return RestrictedUnpickler(f, encoding="latin1").load()
        except PrepError:
            raise
        except Exception as e:  # a truncated or foreign file
            raise PrepError(f"{path}: not a readable Planetoid pickle ({e})") from None


def _dense(m) -> np.ndarray:
    return np.asarray(m.todense() if hasattr(m, "todense") else m, dtype=np.float32)


def undirected_pairs(graph) -> np.ndarray:
    """The citation graph's distinct undirected pairs (u < v), self-loops dropped, sorted."""
    pairs = np.array([(u, v) for u, nbrs in graph.items() for v in nbrs], dtype=np.int64).reshape(-1, 2)
    return np.unique(np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1), axis=0)


def convert_planetoid(root: str, name: str, out: str, partitions: int, partitioning: str,
                      seed: int, feature_dtype: str, overwrite: bool) -> pathlib.Path:
    base = pathlib.Path(root)
    part = {k: load_pickle(base / f"ind.{name}.{k}") for k in ("x", "y", "tx", "ty", "allx", "ally", "graph")}
    test_index = np.array([int(line) for _, line in lines(base / f"ind.{name}.test.index")])
    allx, tx = _dense(part["allx"]), _dense(part["tx"])
    ally, ty = np.asarray(part["ally"]), np.asarray(part["ty"])
    if allx.shape[1] != tx.shape[1] or len(tx) != len(ty) or len(allx) != len(ally):
        raise PrepError(f"{base}: mismatched row counts or feature widths between allx/ally/tx/ty")
    test_range = np.sort(test_index)
    lo, hi = test_range[0], test_range[-1]
    full = hi - lo + 1
    tx_ext = np.zeros((full, tx.shape[1]), np.float32)
    ty_ext = np.zeros((full, ty.shape[1]), ty.dtype)
    tx_ext[test_range - lo], ty_ext[test_range - lo] = tx, ty
    features = np.vstack([allx, tx_ext])
    onehot = np.vstack([ally, ty_ext])
    labels = np.where(onehot.sum(1) > 0, onehot.argmax(1), -1).astype(np.int32)
    features[test_index], labels[test_index] = features[test_range], labels[test_range]
    n = len(features)
    pairs = undirected_pairs(part["graph"])
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise PrepError(f"{base}: the graph names node {pairs.max()} but there are {n} nodes")
    e = np.unique(np.vstack([pairs, pairs[:, ::-1]]), axis=0)  # both directions
    train = np.arange(len(part["y"]))
    valid = np.arange(len(part["y"]), len(part["y"]) + 500)
    return write_node_classification(
        out, name, n, lambda: [EdgeChunk("train", e[:, 0], e[:, 1])], len(e), features, labels,
        {"train": train, "valid": valid, "test": test_index}, int(onehot.shape[1]), partitions,
        partitioning, seed, feature_dtype, overwrite,
        {"padded_test_gaps": int(full - len(test_index)),
         "feature_nnz": int(np.count_nonzero(features))})


def convert_planetoid_links(root: str, name: str, out: str, valid_frac: float, test_frac: float,
                            partitions: int, partitioning: str, seed: int,
                            overwrite: bool) -> pathlib.Path:
    """The citation graph alone, for link prediction: each undirected pair once (no self-loops),
    split by ratio and stored in both directions within its split; nodes without an edge are
    left out (nodes.original_ids maps back to the Planetoid index)."""
    pairs = undirected_pairs(load_pickle(pathlib.Path(root) / f"ind.{name}.graph"))
    if not len(pairs):
        raise PrepError(f"{root}: ind.{name}.graph has no edges between distinct nodes")
    from .edgelist import convert_edges  # noqa: PLC0415 (the node-classification path skips it)
    with tempfile.TemporaryDirectory(prefix="sluice-prep-") as tmp:
        listing = pathlib.Path(tmp) / f"{name}.tsv"
        np.savetxt(listing, pairs, fmt="%d", delimiter="\t")
        return convert_edges(str(listing), out, delimiter="\t", header="no", ids="int",
                             valid_frac=valid_frac, test_frac=test_frac, partitions=partitions,
                             partitioning=partitioning, seed=seed, overwrite=overwrite, name=name,
                             comment="", undirected=True)
