"""Click logs into recommendation datasets: Criteo TSV, Avazu CSV, MovieLens-100k ratings.

A sample is a fixed-size record (docs/format.md): uint64 sparse ids (raw 64-bit hashes of
(feature, value), so tables may be hashed or vocabulary-mapped later), float32 dense features
(counts as log(max(x, 0) + 1)), float32 label, zero padding to 8 bytes."""
from __future__ import annotations

import hashlib
import pathlib
import sys
from collections import Counter
from typing import Callable, Iterator

import numpy as np

from .textio import BadLines, lines
from .writer import DatasetWriter, PrepError

CHUNK = 1 << 16


def record_dtype(sparse: int, dense: int) -> np.dtype:
    size = (8 * sparse + 4 * dense + 4 + 7) // 8 * 8
    fields = {"names": ["sparse", "dense", "label"],
              "formats": [(np.uint64, (sparse,)), (np.float32, (dense,)), np.float32],
              "offsets": [0, 8 * sparse, 8 * sparse + 4 * dense], "itemsize": size}
    return np.dtype(fields)


def feature_hash(feature: int, value: str) -> int:
    """A stable 64-bit id of (feature, value); the empty value is its own id."""
    digest = hashlib.blake2b(f"{feature}\x1f{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def criteo_row(fields: list[str]) -> tuple[float, list[float], list[int]]:
    if len(fields) != 40:
        raise ValueError(f"expected 40 tab-separated fields (label, 13 integer, 26 categorical), got {len(fields)}")
    if fields[0] not in ("0", "1"):
        raise ValueError(f"label '{fields[0]}' is not 0 or 1")
    dense = []
    for k, x in enumerate(fields[1:14]):
        try:
            dense.append(float(np.log(max(int(x), 0) + 1)) if x else 0.0)
        except ValueError:
            raise ValueError(f"integer feature I{k + 1} '{x}' is not an integer") from None
    sparse = []
    for k, x in enumerate(fields[14:]):
        if x:
            try:
                int(x, 16)
            except ValueError:
                raise ValueError(f"categorical feature C{k + 1} '{x}' is not hex") from None
        sparse.append(feature_hash(k, x))
    return float(fields[0]), dense, sparse


def avazu_row(fields: list[str]) -> tuple[float, list[float], list[int]]:
    if len(fields) != 24:
        raise ValueError(f"expected 24 comma-separated fields, got {len(fields)}")
    if fields[1] not in ("0", "1"):
        raise ValueError(f"click '{fields[1]}' is not 0 or 1")
    return float(fields[1]), [], [feature_hash(k, x) for k, x in enumerate(fields[2:])]


def _parse_file(path: pathlib.Path, sep: str, row: Callable, bad: BadLines,
                skip_header: Callable[[str], bool]) -> Iterator[tuple]:
    for number, line in lines(path):
        fields = line.split(sep)
        if number == 1 and skip_header(line):
            continue
        try:
            yield row(fields)
        except ValueError as e:
            bad.bad(f"{path}:{number}", str(e))


def _write_samples(writer: DatasetWriter, split: str, rows: Iterator[tuple], rec: np.dtype,
                   counters: list[Counter] | None) -> int:
    out = writer.array(f"samples.{split}", f"samples/{split}.bin", np.uint8, rec.itemsize,
                       record=True)
    buf = np.zeros(CHUNK, dtype=rec)
    n = total = 0
    for label, dense, sparse in rows:
        buf[n]["label"], buf[n]["dense"], buf[n]["sparse"] = label, dense, sparse
        if counters is not None:
            for c, x in zip(counters, sparse):
                c[x] += 1
        n += 1
        if n == CHUNK:
            out.append(buf.view(np.uint8).reshape(n, rec.itemsize))
            total, n = total + n, 0
    out.append(buf[:n].view(np.uint8).reshape(n, rec.itemsize))
    return total + n


def convert_clicks(kind: str, files: dict[str, pathlib.Path], out: str, on_error: str,
                   min_count: int, overwrite: bool, name: str) -> pathlib.Path:
    sep, row, sparse, dense = {"criteo": ("\t", criteo_row, 26, 13),
                               "avazu": (",", avazu_row, 22, 0)}[kind]
    header = (lambda line: line.startswith("id,")) if kind == "avazu" else (lambda line: False)
    return _convert(files, out, sparse, dense, on_error, min_count, overwrite, name,
                    lambda path, bad: _parse_file(path, sep, row, bad, header))


def _convert(files, out, sparse, dense, on_error, min_count, overwrite, name, parse):
    if "train" not in files:
        raise PrepError("a click log needs a train split")
    rec = record_dtype(sparse, dense)
    bad = BadLines(on_error)
    writer = DatasetWriter(out, overwrite)
    try:
        counters = [Counter() for _ in range(sparse)] if min_count > 0 else None
        counts, clicks = {}, {}
        for split, path in files.items():
            counts[split] = _write_samples(writer, split, parse(path, bad), rec,
                                           counters if split == "train" else None)
            writer.files[f"samples.{split}"]._f.flush()
            labels = np.fromfile(writer.files[f"samples.{split}"].path, dtype=rec)["label"]
            clicks[split] = int(labels.sum())
        bad.report()
        if sum(counts.values()) == 0:
            raise PrepError("no samples")
        vocab = {}
        if counters is not None:
            for k, c in enumerate(counters):
                kept = np.array(sorted((x for x, n in c.items() if n >= min_count),
                                       key=lambda x: (-c[x], x)), dtype=np.uint64)
                writer.put(f"vocab.{k}.ids", f"vocab/{k}_ids.bin", kept, np.uint64)
                vocab[str(k)] = len(kept)
        manifest = {
            "task": "recommendation", "name": name,
            "counts": {"nodes": 0, "relations": 0, "feature_dim": 0, "classes": 0, "edges": {},
                       "samples": counts},
            "record": {"sparse": sparse, "dense": dense, "bytes": rec.itemsize},
            "stats": {"click_rate": {s: clicks[s] / max(counts[s], 1) for s in counts},
                      "skipped_lines": bad.skipped, "vocab_min_count": min_count,
                      "vocab_sizes": vocab},
        }
        result = writer.commit(manifest)
        print(f"wrote {result}: " + ", ".join(f"{s} {n:,}" for s, n in counts.items()), file=sys.stderr)
        return result
    except BaseException:
        writer.abort()
        raise


def convert_movielens(root: str, out: str, base: str, on_error: str, overwrite: bool,
                      side_features: bool) -> pathlib.Path:
    """MovieLens-100k: <base>.base / <base>.test (user, item, rating, time); rating >= 4 is a
    click. Sparse features: user, item, and with side features age bucket, gender, occupation
    (u.user) and the first genre (u.item)."""
    r = pathlib.Path(root)
    users, items = {}, {}
    if side_features:
        for number, line in lines(r / "u.user"):
            f = line.split("|")
            if len(f) != 5:
                raise PrepError(f"{r / 'u.user'}:{number}: expected 5 '|'-separated fields")
            users[f[0]] = (str(min(int(f[1]) // 10, 6)), f[2], f[3])
        with open(r / "u.item", encoding="latin-1") as fh:
            for number, line in enumerate(fh, 1):
                f = line.rstrip("\r\n").split("|")
                if len(f) != 24:
                    raise PrepError(f"{r / 'u.item'}:{number}: expected 24 '|'-separated fields")
                genres = [k for k, g in enumerate(f[5:]) if g == "1"]
                items[f[0]] = str(genres[0] if genres else -1)
    sparse = 6 if side_features else 2

    def row(fields):
        if len(fields) != 4:
            raise ValueError(f"expected 4 tab-separated fields, got {len(fields)}")
        user, item, rating = fields[0], fields[1], fields[2]
        if not rating.isdigit() or not 1 <= int(rating) <= 5:
            raise ValueError(f"rating '{rating}' is not 1..5")
        values = [user, item]
        if side_features:
            if user not in users or item not in items:
                raise ValueError(f"user {user} or item {item} missing from u.user/u.item")
            values += [*users[user], items[item]]
        return float(int(rating) >= 4), [], [feature_hash(k, v) for k, v in enumerate(values)]

    files = {"train": r / f"{base}.base", "test": r / f"{base}.test"}
    return _convert(files, out, sparse, 0, on_error, 0, overwrite, f"movielens-100k-{base}",
                    lambda path, bad: _parse_file(path, "\t", row, bad, lambda line: False))
