"""Knowledge-graph triples with given train/valid/test files (the FB15k-237 layout)."""
from __future__ import annotations

import pathlib

import numpy as np

from .graph import EdgeChunk, GraphSpec, build_graph, degree_stats, write_names
from .textio import BadLines, lines
from .writer import DatasetWriter, PrepError

SPLIT_FILES = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}


def find_split(root: pathlib.Path, name: str) -> pathlib.Path | None:
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.exists():
            return candidate
    return None


def read_dict(path: pathlib.Path) -> list[str]:
    """`id<TAB>name` lines, ids 0..n-1 in any order."""
    names: dict[int, str] = {}
    for number, line in lines(path):
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].isdigit():
            raise PrepError(f"{path}:{number}: expected 'id<TAB>name'")
        names[int(parts[0])] = parts[1]
    if sorted(names) != list(range(len(names))):
        raise PrepError(f"{path}: ids are not 0..{len(names) - 1}")
    return [names[i] for i in range(len(names))]


def triples(path: pathlib.Path, bad: BadLines):
    """(line number, head, relation, tail) of each well-formed line, streamed."""
    for number, line in lines(path):
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) != 3 or not all(parts):
            bad.bad(f"{path}:{number}", f"expected 'head<TAB>relation<TAB>tail', got {len(parts)} fields")
            continue
        yield number, parts[0], parts[1], parts[2]


def id_chunks(path: pathlib.Path, split: str, entity_id: dict, relation_id: dict, bad: BadLines,
              chunk: int = 1 << 20):
    """EdgeChunks of one split file, streamed (no whole-input lists of strings)."""
    h, r, t = [], [], []
    for number, head, rel, tail in triples(path, bad):
        try:
            h.append(entity_id[head])
            r.append(relation_id[rel])
            t.append(entity_id[tail])
        except KeyError as e:
            raise PrepError(f"{path}:{number}: {e} is not in the entity/relation dictionaries") from None
        if len(h) == chunk:
            yield EdgeChunk(split, np.array(h), np.array(t), np.array(r))
            h, r, t = [], [], []
    if h:
        yield EdgeChunk(split, np.array(h), np.array(t), np.array(r))


def convert_kg(root: str, out: str, partitions: int, partitioning: str, seed: int,
               on_error: str, overwrite: bool, name: str | None = None) -> pathlib.Path:
    root_path = pathlib.Path(root)
    paths = {}
    for split, filename in SPLIT_FILES.items():
        path = find_split(root_path, filename)
        if path is None and split == "train":
            raise PrepError(f"{root_path}: no {filename} or {filename}.gz")
        if path is not None:
            paths[split] = path
    entity_dict, relation_dict = root_path / "entities.dict", root_path / "relations.dict"
    if entity_dict.exists() and relation_dict.exists():
        entities, relations = read_dict(entity_dict), read_dict(relation_dict)
    else:  # the union of the splits, in order of first appearance (a streaming first pass)
        entities, relations = [], []
        seen_e, seen_r = {}, {}
        for path in paths.values():
            for _, h, r, t in triples(path, BadLines("skip")):
                for x in (h, t):
                    if x not in seen_e:
                        seen_e[x] = len(entities)
                        entities.append(x)
                if r not in seen_r:
                    seen_r[r] = len(relations)
                    relations.append(r)
    entity_id = {e: i for i, e in enumerate(entities)}
    relation_id = {r: i for i, r in enumerate(relations)}
    bad = BadLines(on_error)

    spec = GraphSpec(num_nodes=len(entities), num_relations=len(relations),
                     num_partitions=partitions, partitioning=partitioning, seed=seed, has_rel=True)
    writer = DatasetWriter(out, overwrite)
    try:
        def chunks():  # called twice with degree partitioning: count bad lines once
            bad.skipped, bad.first = 0, None
            for split, path in paths.items():
                yield from id_chunks(path, split, entity_id, relation_id, bad)

        g = build_graph(writer, spec, chunks)
        bad.report()
        order = np.argsort(g.new_id)  # old id of each new id
        write_names(writer, "nodes.names", "nodes/names", entities, order)
        write_names(writer, "relations.names", "relations/names", relations)
        writer.put("nodes.out_degree", "nodes/out_degree.bin", g.out_degree, np.int64)
        writer.put("nodes.in_degree", "nodes/in_degree.bin", g.in_degree, np.int64)
        return writer.commit({
            "task": "link_prediction", "name": name or root_path.name,
            "counts": {"nodes": len(entities), "relations": len(relations), "feature_dim": 0,
                       "classes": 0, "edges": g.edges, "samples": {}},
            "partitions": {"count": partitions, "bounds": g.bounds.tolist(),
                           "method": partitioning, "seed": seed},
            "stats": {**degree_stats(g.out_degree, g.in_degree), "skipped_lines": bad.skipped},
        })
    except BaseException:
        writer.abort()
        raise
