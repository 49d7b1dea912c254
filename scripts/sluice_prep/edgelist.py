"""Edge lists for link prediction: CSV/TSV/space-separated, with or without a header, integer
or string ids, optional relation and weight columns, CRLF or LF. Streams: text is parsed once
in blocks into a scratch file of original ids; a second pass over that file renumbers."""
from __future__ import annotations

import itertools
import pathlib
import sys

import numpy as np

from .graph import EdgeChunk, GraphSpec, Progress, build_graph, degree_stats, write_names
from .textio import BadLines, open_text
from .writer import DatasetWriter, PrepError

BLOCK_BYTES = 32 << 20
CHUNK_EDGES = 4 << 20  # edges per chunk when renumbering and bucketing
PARSE_LINES = 1 << 19  # lines per parsed batch: their str objects dominate memory


def sniff(first: str) -> str | None:
    """The delimiter of a line: tab, comma, semicolon, or None for runs of spaces."""
    for d in ("\t", ",", ";"):
        if d in first:
            return d
    return None


# Column names that make a first line a header even when every column is text (a header-only
# file is then no edges, not one edge between nodes "src" and "dst").
HEADER_NAMES = {"src", "dst", "source", "target", "from", "to", "head", "tail", "u", "v",
                "fromnodeid", "tonodeid", "node1", "node2", "id1", "id2", "subject", "object",
                "relation", "rel", "predicate", "weight", "sourceid", "targetid", "srcid", "dstid"}
INT64 = (-(1 << 63), (1 << 63) - 1)


def _parses(text: str, kind=int) -> bool:
    """Whether `text` converts with `kind` (int or float)."""
    try:
        kind(text)
        return True
    except ValueError:
        return False


class EdgeListReader:
    """Parses an edge list into blocks of (src, dst, rel, weight) columns of raw ids."""

    def __init__(self, path: str, delimiter: str | None, header: str, src_col: int, dst_col: int,
                 rel_col: int | None, weight_col: int | None, ids: str, bad: BadLines,
                 comment: str = "#%"):
        self.path = pathlib.Path(path)
        self.comment = tuple(comment)  # lines starting with one of these are comments
        self.comments = 0
        self.cols = {"src": src_col, "dst": dst_col}
        if rel_col is not None:
            self.cols["rel"] = rel_col
        if weight_col is not None:
            self.cols["weight"] = weight_col
        self.ncols_min = max(self.cols.values()) + 1
        self.bad = bad
        with open_text(self.path) as f:
            data = (line.rstrip("\r\n") for line in f
                    if line.strip() and not (self.comment and line.startswith(self.comment)))
            head = list(itertools.islice(data, 2))
        if not head:
            raise PrepError(f"{self.path}: empty edge list (no line but comments or blank ones)")
        self.delimiter = sniff(head[0]) if delimiter == "auto" else (delimiter or None)
        first = self._split(head[0])
        if header == "auto":
            # A header when some column is numeric on the second line but not on the first.
            # (A file whose columns are all text needs --header yes.)
            second = self._split(head[1]) if len(head) > 1 else []
            has_header = any(_parses(second[c], float) and not _parses(first[c], float)
                             for c in range(min(len(first), len(second))))
            names = [first[c].lower().replace("_", "").replace("-", "").replace(" ", "")
                     for c in (src_col, dst_col) if c < len(first)]
            has_header = has_header or (len(names) == 2 and all(n in HEADER_NAMES for n in names))
        else:
            has_header = header == "yes"
        self.header_pending = has_header
        if ids == "auto":
            probe = self._split(head[1]) if has_header and len(head) > 1 else first
            ids = "int" if all(_parses(probe[c]) for c in (src_col, dst_col) if c < len(probe)) else "str"
        self.string_ids = ids == "str"
        if rel_col is None:  # a text column left unread is most likely the relation
            probe = self._split(head[1]) if has_header and len(head) > 1 else first
            extra = [c for c in range(len(probe))
                     if c not in self.cols.values() and not _parses(probe[c], float)]
            if extra:
                print(f"warning: {self.path}: column {extra[0]} holds text ('{probe[extra[0]]}') "
                      f"and is not read: every edge gets one relation; pass --rel-col {extra[0]} "
                      "if it names relations", file=sys.stderr)

    def _split(self, line: str) -> list[str]:
        return [f.strip() for f in (line.split(self.delimiter) if self.delimiter else line.split())]

    def blocks(self):
        """Yields dicts of column arrays (ids as int64 or lists of str, weight as float32).
        Integer-only files take a vectorised path per batch of lines; a batch with any
        irregular line is re-read line by line, which names the bad line."""
        fast = not self.string_ids and "rel" not in self.cols
        number = 0
        with open_text(self.path) as f:
            while True:
                batch = list(itertools.islice(f, PARSE_LINES))
                if not batch:
                    return
                first_number = number + 1
                number += len(batch)
                batch = self._blank_comments_and_header(batch)
                parsed = self._fast(batch) if fast else None
                yield parsed if parsed is not None else self._slow(batch, first_number)

    def _blank_comments_and_header(self, batch: list[str]) -> list[str]:
        """Comment lines and the header become empty lines, so line numbers stay right."""
        if self.comment:
            kept = sum(1 for line in batch if not line.startswith(self.comment))
            if kept != len(batch):
                self.comments += len(batch) - kept
                batch = ["" if line.startswith(self.comment) else line for line in batch]
        if self.header_pending:
            for i, line in enumerate(batch):
                if line.strip():
                    batch[i], self.header_pending = "", False
                    break
        return batch

    def _fast(self, batch: list[str]) -> dict | None:
        d = self.delimiter
        widths = [line.count(d) + 1 if d else len(line.split()) for line in batch if line.strip()]
        if not widths or min(widths) != max(widths) or widths[0] < self.ncols_min:
            return None
        rows, width = len(widths), widths[0]
        text = "".join(batch)
        tokens = (text.replace(d, " ") if d else text).split()
        if len(tokens) != rows * width:  # an empty field
            return None
        table = np.array(tokens).reshape(rows, width)
        try:
            out = {k: table[:, c].astype(np.int64) for k, c in self.cols.items() if k != "weight"}
            if "weight" in self.cols:
                out["weight"] = table[:, self.cols["weight"]].astype(np.float32)
        except (ValueError, OverflowError):
            return None
        return out

    def _slow(self, batch: list[str], first_number: int) -> dict:
        rows: dict[str, list] = {k: [] for k in self.cols}
        for number, line in enumerate(batch, first_number):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = self._split(line)
            if len(fields) < self.ncols_min:
                self.bad.bad(f"{self.path}:{number}",
                             f"expected at least {self.ncols_min} fields, got {len(fields)}")
                continue
            try:
                parsed = {k: self._value(k, fields[c]) for k, c in self.cols.items()}
            except ValueError as e:
                self.bad.bad(f"{self.path}:{number}", str(e))
                continue
            for k, v in parsed.items():
                rows[k].append(v)
        return self._arrays(rows)

    def _value(self, column: str, text: str):
        if column == "weight":
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"weight '{text}' is not a number") from None
        if column == "rel":
            if not text:
                raise ValueError("empty relation")
            return text
        if not self.string_ids:
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{column} id '{text}' is not an integer (use --ids str)") from None
            if not INT64[0] <= value <= INT64[1]:
                raise ValueError(f"{column} id '{text}' is outside the 64-bit integer range "
                                 f"(use --ids str)")
            return value
        if not text:
            raise ValueError(f"empty {column} id")
        return text

    @staticmethod
    def _arrays(rows: dict[str, list]) -> dict:
        out = {}
        for k, v in rows.items():
            if k == "weight":
                out[k] = np.asarray(v, dtype=np.float32)
            elif v and isinstance(v[0], int):
                out[k] = np.asarray(v, dtype=np.int64)
            else:
                out[k] = v
        return out


class _IdSet:
    """The distinct integer ids of a stream. Small non-negative ids (below 16M or 4x the ids
    seen so far) go into a byte map and renumber through a direct table; others (hashes,
    negative or sparse ids) into merged sorted arrays and renumber by binary search."""

    def __init__(self):
        self.seen = np.zeros(0, dtype=bool)
        self.uniques: list[np.ndarray] | None = None
        self.count = 0

    def add(self, *arrays: np.ndarray) -> None:
        for ids in arrays:
            self.count += ids.size
            dense_limit = min(max(1 << 24, 4 * self.count), 2**31)
            if self.uniques is None and ids.size and (ids.min() < 0 or ids.max() >= dense_limit):
                self.uniques = [np.flatnonzero(self.seen)]
                self.seen = np.zeros(0, dtype=bool)
            if self.uniques is not None:
                self.uniques.append(np.unique(ids))
                if len(self.uniques) > 8:
                    self.uniques = [np.unique(np.concatenate(self.uniques))]
                continue
            top = int(ids.max()) + 1 if ids.size else 0
            if top > len(self.seen):
                grown = np.zeros(max(top, 2 * len(self.seen)), dtype=bool)
                grown[:len(self.seen)] = self.seen
                self.seen = grown
            self.seen[ids] = True

    def finish(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(sorted original ids, direct old->new table or None)."""
        if self.uniques is not None:
            return np.unique(np.concatenate(self.uniques)), None
        original = np.flatnonzero(self.seen)
        lookup = (np.cumsum(self.seen, dtype=np.int64) - 1).astype(
            np.int32 if len(original) < 2**31 else np.int64)
        self.seen = np.zeros(0, dtype=bool)
        return original, lookup


def convert_edges(path: str, out: str, *, delimiter: str = "auto", header: str = "auto",
                  src_col: int = 0, dst_col: int = 1, rel_col: int | None = None,
                  weight_col: int | None = None, ids: str = "auto", valid_frac: float = 0.0,
                  test_frac: float = 0.0, partitions: int = 1, partitioning: str = "random",
                  seed: int = 0, on_error: str = "stop", overwrite: bool = False,
                  name: str | None = None, comment: str = "#%",
                  self_loops: str = "keep", undirected: bool = False) -> pathlib.Path:
    """`undirected`: each line is an undirected edge, drawn into a split once and stored there
    in both directions (a file that lists both directions already would store each twice)."""
    if not 0 <= valid_frac < 1 or not 0 <= test_frac < 1 or valid_frac + test_frac >= 1:
        raise PrepError("--valid-frac and --test-frac must be in [0, 1) and sum below 1")
    if self_loops not in ("keep", "drop"):
        raise PrepError(f"--self-loops must be keep or drop, got '{self_loops}'")
    bad = BadLines(on_error)
    reader = EdgeListReader(path, delimiter, header, src_col, dst_col, rel_col, weight_col, ids, bad,
                            comment)
    writer = DatasetWriter(out, overwrite)
    try:
        return _convert(reader, writer, valid_frac, test_frac, partitions, partitioning, seed, bad,
                        name or pathlib.Path(path).stem, self_loops == "drop", undirected)
    except BaseException:
        writer.abort()
        raise


def _convert(reader: EdgeListReader, writer: DatasetWriter, valid_frac: float, test_frac: float,
             partitions: int, partitioning: str, seed: int, bad: BadLines, name: str,
             drop_loops: bool, undirected: bool):
    has_rel, has_weight = "rel" in reader.cols, "weight" in reader.cols
    node_names: dict[str, int] = {}
    rel_names: dict[str, int] = {}
    scratch = writer.scratch("edges.raw")
    rec = np.dtype([("src", np.int64), ("dst", np.int64), ("rel", np.int64), ("weight", np.float32)])
    ids_seen = _IdSet()
    total = loops = 0
    progress = Progress(f"parsing {reader.path.name}")
    with open(scratch, "wb") as f:
        for block in reader.blocks():
            r = np.zeros(len(block["src"]), dtype=rec)
            for col in ("src", "dst"):
                v = block[col]
                if isinstance(v, list):
                    v = np.fromiter((node_names.setdefault(x, len(node_names)) for x in v), np.int64, len(v))
                r[col] = v
            if has_rel:  # relation ids, integer or not, are names numbered by first appearance
                v = block["rel"]
                r["rel"] = np.fromiter((rel_names.setdefault(x, len(rel_names)) for x in v),
                                       np.int64, len(v))
            if has_weight:
                r["weight"] = block["weight"]
            loop = r["src"] == r["dst"]
            loops += int(loop.sum())
            if drop_loops:
                r = r[~loop]
            if not reader.string_ids:
                ids_seen.add(r["src"], r["dst"])
            f.write(r.tobytes())
            total += len(r)
            progress.add(len(r))
    progress.finish()
    bad.report()
    if reader.comments:
        print(f"skipped {reader.comments:,} comment lines", file=sys.stderr)
    if loops:
        print(f"{'dropped' if drop_loops else 'kept'} {loops:,} self-loops"
              + ("" if drop_loops else " (--self-loops drop drops them)"), file=sys.stderr)
    if total == 0:
        raise PrepError(f"{reader.path}: no edges" + (" (every edge was a self-loop)" if loops else ""))
    lookup = None
    if reader.string_ids:
        num_nodes, original = len(node_names), None
    else:
        original, lookup = ids_seen.finish()
        num_nodes = len(original)
    num_relations = len(rel_names) if has_rel else 1
    spec = GraphSpec(num_nodes=num_nodes, num_relations=num_relations, num_partitions=partitions,
                     partitioning=partitioning, seed=seed, has_rel=has_rel, has_weight=has_weight)

    def read_scratch():
        # Plain reads, not a memmap: mapped pages would count against the process's memory.
        with open(scratch, "rb") as raw:
            while len(r := np.fromfile(raw, dtype=rec, count=CHUNK_EDGES)):
                yield r

    def chunks():
        rng = np.random.default_rng(seed + 1)  # the same split draw on every pass
        for r in read_scratch():
            src, dst = r["src"], r["dst"]
            if lookup is not None:
                src, dst = lookup[src].astype(np.int64), lookup[dst].astype(np.int64)
            elif original is not None:
                src, dst = np.searchsorted(original, src), np.searchsorted(original, dst)
            u = rng.random(len(r))
            split = np.where(u < test_frac, 2, np.where(u < test_frac + valid_frac, 1, 0))
            for k, s in enumerate(("train", "valid", "test")):
                m = split == k
                if m.any():
                    rel, weight = r["rel"][m] if has_rel else None, r["weight"][m] if has_weight else None
                    yield EdgeChunk(s, src[m], dst[m], rel, weight)
                    if undirected:  # the reverse edge, in the same split
                        yield EdgeChunk(s, dst[m], src[m], rel, weight)

    g = build_graph(writer, spec, chunks, total * (2 if undirected else 1))
    if not g.edges.get("train"):
        raise PrepError(f"{reader.path}: none of its {total:,} edges fell into the train split "
                        f"(--valid-frac {valid_frac:g}, --test-frac {test_frac:g})")
    order = np.argsort(g.new_id)
    if original is not None:
        writer.put("nodes.original_ids", "nodes/original_ids.bin", original[order], np.int64)
    else:
        names = [None] * num_nodes
        for s, i in node_names.items():
            names[i] = s
        write_names(writer, "nodes.names", "nodes/names", names, order)
    if rel_names:
        names = [None] * len(rel_names)
        for s, i in rel_names.items():
            names[i] = s
        write_names(writer, "relations.names", "relations/names", names)
    writer.put("nodes.out_degree", "nodes/out_degree.bin", g.out_degree, np.int64)
    writer.put("nodes.in_degree", "nodes/in_degree.bin", g.in_degree, np.int64)
    stats = {**degree_stats(g.out_degree, g.in_degree), "skipped_lines": bad.skipped,
             "comment_lines": reader.comments, "self_loops": loops,
             "self_loops_dropped": drop_loops, "undirected": undirected,
             "bucketing_edges_per_second": round(g.edges_per_second)}
    result = writer.commit({
        "task": "link_prediction", "name": name,
        "counts": {"nodes": num_nodes, "relations": num_relations, "feature_dim": 0, "classes": 0,
                   "edges": g.edges, "samples": {}},
        "partitions": {"count": partitions, "bounds": g.bounds.tolist(), "method": partitioning,
                       "seed": seed},
        "stats": stats,
    })
    print(f"wrote {result}: {num_nodes:,} nodes, {total:,} edges"
          + (" (each stored in both directions)" if undirected else ""), file=sys.stderr)
    return result
