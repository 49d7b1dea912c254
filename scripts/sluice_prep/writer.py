"""Writes a dataset directory: arrays appended in pieces with their CRC-32 computed as written,
then manifest.json, then one rename of the temporary directory into place. An interrupted run
leaves only `<dir>.tmp-<pid>`, never a half-dataset at `<dir>`."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import zlib
from typing import Any

import numpy as np

from . import FORMAT_NAME, FORMAT_VERSION


class PrepError(Exception):
    """A bad input or a failed step: one line saying what, where and why."""


class ArrayFile:
    """An array written in appended pieces; tracks element count, bytes and CRC-32."""

    def __init__(self, path: pathlib.Path, rel: str, dtype: np.dtype, width: int = 1,
                 record: bool = False):
        self.path, self.rel, self.dtype, self.width = path, rel, np.dtype(dtype), width
        self.record = record  # rows of `width` bytes described by the manifest's "record"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "wb")
        self.rows = 0
        self.crc = 0
        # Content checks, recorded in the manifest: an integer array's smallest and largest
        # value, and that a float array holds only finite values (checked as it is written).
        self.lo: int | None = None
        self.hi: int | None = None

    def append(self, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=self.dtype)
        if self.width > 1 and (data.ndim != 2 or data.shape[1] != self.width):
            raise PrepError(f"{self.rel}: rows of width {self.width} expected, got shape {data.shape}")
        if data.size and not record_like(self):
            if self.dtype.kind == "i":
                lo, hi = int(data.min()), int(data.max())
                self.lo = lo if self.lo is None else min(self.lo, lo)
                self.hi = hi if self.hi is None else max(self.hi, hi)
            elif self.dtype.kind == "f" and not np.isfinite(data).all():
                bad = int(np.flatnonzero(~np.isfinite(data.reshape(-1)))[0])
                raise PrepError(f"{self.rel}: row {self.rows + bad // self.width}, column "
                                f"{bad % self.width} is not finite (nan or infinite)")
        buf = data.tobytes()
        self._f.write(buf)
        self.crc = zlib.crc32(buf, self.crc)
        self.rows += data.shape[0] if data.ndim else 1

    def close(self) -> dict[str, Any]:
        self._f.close()
        shape = [self.rows] if self.width == 1 or self.record else [self.rows, self.width]
        size = self.path.stat().st_size
        expected = self.rows * self.width * self.dtype.itemsize
        if size != expected:
            raise PrepError(f"{self.path}: wrote {size} bytes, expected {expected}")
        dtype = "record" if self.record else _dtype_name(self.dtype)
        entry = {"path": self.rel, "dtype": dtype, "shape": shape, "bytes": size,
                 "crc32": f"{self.crc & 0xffffffff:08x}"}
        if self.lo is not None and dtype in ("int32", "int64"):
            entry["range"] = [self.lo, self.hi]
        if dtype in ("float32", "float16"):
            entry["finite"] = True
        return entry


def record_like(f: "ArrayFile") -> bool:
    return f.record or f.dtype.kind == "V"


def bounds_of(manifest: dict[str, Any], role: str) -> tuple[int, int, str] | None:
    """The values an integer array of `role` may hold, [lo, hi), and the count that bounds them
    (the same rule as the reader's BoundsOf in storage/dataset.cc)."""
    counts = manifest.get("counts", {})
    nodes = (0, int(counts.get("nodes", 0)), "counts.nodes")
    if role.startswith("edges."):
        if role.endswith((".src", ".dst")):
            return nodes
        if role.endswith(".rel"):
            return 0, int(counts.get("relations", 0)), "counts.relations"
        return None
    if role in ("nodes.train", "nodes.valid", "nodes.test"):
        return nodes
    if role == "nodes.labels":
        return -1, int(counts.get("classes", 0)), "counts.classes"
    return None


def check_ranges(manifest: dict[str, Any], files: dict[str, dict[str, Any]]) -> None:
    """Every recorded id range within the counts that bound it: an id beyond them is one line
    naming the array and the count, before anything is committed."""
    for role, entry in files.items():
        bounds = bounds_of(manifest, role)
        if bounds is None or "range" not in entry:
            continue
        lo, hi, field = bounds
        smallest, largest = entry["range"]
        if smallest < lo or largest >= hi:
            bad = smallest if smallest < lo else largest
            raise PrepError(f"{role}: id {bad} is outside [{lo}, {hi}) ({field})")


def _dtype_name(dtype: np.dtype) -> str:
    names = {np.dtype(np.int32): "int32", np.dtype(np.int64): "int64",
             np.dtype(np.uint8): "uint8", np.dtype(np.uint64): "uint64",
             np.dtype(np.float16): "float16", np.dtype(np.float32): "float32"}
    if dtype not in names:
        raise PrepError(f"dtype {dtype} is not part of the dataset format")
    return names[dtype]


def _remove_stale_temporaries(out: pathlib.Path) -> None:
    """Removes `<out>.tmp-<pid>` folders whose writer is gone (killed with SIGKILL, or the
    machine went down): they are never a dataset, only its unfinished copy."""
    parent = out.parent if out.parent.is_dir() else None
    if parent is None:
        return
    for tmp in parent.glob(f"{out.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


class DatasetWriter:
    """Collects arrays under roles and commits them with a manifest.

    Usage: w = DatasetWriter(out_dir); f = w.array(role, path, dtype); f.append(...);
    w.commit(manifest_fields). Without commit() (an exception), abort() removes everything."""

    def __init__(self, out_dir: str | os.PathLike, overwrite: bool = False):
        self.out = pathlib.Path(out_dir)
        if self.out.exists() and not overwrite:
            raise PrepError(f"{self.out} exists (pass --overwrite to replace it)")
        self.tmp = self.out.with_name(f"{self.out.name}.tmp-{os.getpid()}")
        _remove_stale_temporaries(self.out)
        shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            self.tmp.mkdir(parents=True)
        except OSError as e:
            raise PrepError(f"{self.out}: cannot create the output here ({e.strerror})") from None
        self.files: dict[str, ArrayFile] = {}

    def array(self, role: str, rel: str, dtype, width: int = 1, record: bool = False) -> ArrayFile:
        if role in self.files:
            raise PrepError(f"role {role} written twice")
        f = ArrayFile(self.tmp / rel, rel, dtype, width, record)
        self.files[role] = f
        return f

    def put(self, role: str, rel: str, values: np.ndarray, dtype=None) -> None:
        values = np.asarray(values)
        width = values.shape[1] if values.ndim == 2 else 1
        f = self.array(role, rel, dtype or values.dtype, width)
        f.append(values)

    def scratch(self, name: str) -> pathlib.Path:
        """A scratch path inside the temporary directory (removed at commit)."""
        path = self.tmp / "_scratch" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def commit(self, manifest: dict[str, Any]) -> pathlib.Path:
        files = {role: f.close() for role, f in sorted(self.files.items())}
        check_ranges(manifest, files)
        shutil.rmtree(self.tmp / "_scratch", ignore_errors=True)
        full = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **manifest, "files": files}
        (self.tmp / "manifest.json").write_text(json.dumps(full, indent=2) + "\n")
        if self.out.exists():
            shutil.rmtree(self.out)
        os.rename(self.tmp, self.out)
        return self.out

    def abort(self) -> None:
        for f in self.files.values():
            f._f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
