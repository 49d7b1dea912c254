"""Rows laid out by frequency: a click log whose ids become row numbers in order of their count.

Each table's ids are counted on the train split and numbered by descending count (ties by id);
ids that appear only in other splits follow, by id. Every sample's ids are rewritten to those
numbers, so a table's hot rows are a dense prefix: they share pages of the row file, and with
`model.ids: modulo` and `model.table_rows` at least the table's distinct ids, row r is id r.
The map is kept in the dataset (`layout.K.ids`: row r's original id), so rows can be traced
back. Labels and dense features are copied unchanged."""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

from .recsys import CHUNK, record_dtype
from .writer import DatasetWriter, PrepError


def _read_manifest(src: pathlib.Path) -> dict:
    try:
        m = json.loads((src / "manifest.json").read_text())
    except FileNotFoundError:
        raise PrepError(f"{src}: no manifest.json (not a sluice dataset)") from None
    except json.JSONDecodeError as e:
        raise PrepError(f"{src}/manifest.json: not JSON ({e})") from None
    if m.get("task") != "recommendation":
        raise PrepError(f"{src}: a {m.get('task')} dataset; layout rewrites click logs (recommendation)")
    if any(role.startswith("vocab.") for role in m.get("files", {})):
        raise PrepError(f"{src}: has vocabularies (rows already numbered by count for model.ids: vocab); "
                        "layout is for logs whose ids are hashed (model.ids: modulo)")
    if "samples.train" not in m.get("files", {}):
        raise PrepError(f"{src}: no train split to count ids on")
    return m


def _records(src: pathlib.Path, m: dict, split: str, rec: np.dtype) -> np.ndarray:
    f = m["files"][f"samples.{split}"]
    path = src / f["path"]
    if path.stat().st_size != f["bytes"] or f["bytes"] % rec.itemsize != 0:
        raise PrepError(f"{path}: {path.stat().st_size} bytes, the manifest says {f['bytes']} "
                        f"({rec.itemsize}-byte records)")
    return np.memmap(path, dtype=rec, mode="r")


def _table_order(columns: list[np.ndarray]) -> np.ndarray:
    """Ids of one table, row by row: train ids by descending count (ties by id), then ids of
    the other splits by id. columns[0] is the train split's column."""
    ids, counts = np.unique(columns[0], return_counts=True)
    order = ids[np.lexsort((ids, -counts))]
    rest = [np.setdiff1d(np.unique(c), ids, assume_unique=True) for c in columns[1:]]
    if rest:
        order = np.concatenate([order, np.unique(np.concatenate(rest))])
    return order


def layout_by_frequency(src: str, out: str, overwrite: bool) -> pathlib.Path:
    src_p = pathlib.Path(src)
    m = _read_manifest(src_p)
    sparse, dense = m["record"]["sparse"], m["record"]["dense"]
    rec = record_dtype(sparse, dense)
    splits = ["train"] + sorted(s[len("samples."):] for s in m["files"]
                                if s.startswith("samples.") and s != "samples.train")
    data = {s: _records(src_p, m, s, rec) for s in splits}
    # Per table: the sorted distinct ids and each one's row (the inverse of its order).
    keys, rows, orders = [], [], []
    for k in range(sparse):
        order = _table_order([np.asarray(data[s]["sparse"][:, k]) for s in splits])
        sort = np.argsort(order, kind="stable")
        keys.append(order[sort])
        rows.append(sort.astype(np.uint64))
        orders.append(order)
        print(f"layout: table {k}: {len(order):,} ids", file=sys.stderr)
    writer = DatasetWriter(out, overwrite)
    try:
        for split in splits:
            dst = writer.array(f"samples.{split}", f"samples/{split}.bin", np.uint8, rec.itemsize, record=True)
            src_rec = data[split]
            for start in range(0, len(src_rec), CHUNK):
                r = np.array(src_rec[start:start + CHUNK])
                for k in range(sparse):
                    r["sparse"][:, k] = rows[k][np.searchsorted(keys[k], r["sparse"][:, k])]
                dst.append(r.view(np.uint8).reshape(len(r), rec.itemsize))
        for k, order in enumerate(orders):
            writer.put(f"layout.{k}.ids", f"layout/{k}_ids.bin", order, np.uint64)
        manifest = {key: value for key, value in m.items() if key not in ("files", "format", "format_version")}
        stats = dict(m.get("stats", {}))
        stats["layout"] = {"by": "descending count on the train split, ties by id",
                           "source": str(src_p.resolve()), "rows": [len(o) for o in orders]}
        manifest["stats"] = stats
        result = writer.commit(manifest)
        print(f"wrote {result}: rows by frequency; largest table {max(len(o) for o in orders):,} rows "
              f"(model.ids: modulo with model.table_rows at least that keeps every id its own row)",
              file=sys.stderr)
        return result
    except BaseException:
        writer.abort()
        raise
