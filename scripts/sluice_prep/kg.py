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


def read_triples(path: pathlib.Path, bad: BadLines) -> list[tuple[str, str, str]]:
    triples = []
    for number, line in lines(path):
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) != 3 or not all(parts):
            bad.bad(f"{path}:{number}", f"expected 'head<TAB>relation<TAB>tail', got {len(parts)} fields")
            continue
        triples.append((parts[0], parts[1], parts[2]))
    return triples


def convert_kg(root: str, out: str, partitions: int, partitioning: str, seed: int,
               on_error: str, overwrite: bool, name: str | None = None) -> pathlib.Path:
    root_path = pathlib.Path(root)
    bad = BadLines(on_error)
    splits = {}
    for split, filename in SPLIT_FILES.items():
        path = find_split(root_path, filename)
        if path is None:
            if split == "train":
                raise PrepError(f"{root_path}: no {filename} or {filename}.gz")
            continue
        splits[split] = read_triples(path, bad)
    bad.report()
    entity_dict, relation_dict = root_path / "entities.dict", root_path / "relations.dict"
    if entity_dict.exists() and relation_dict.exists():
        entities, relations = read_dict(entity_dict), read_dict(relation_dict)
    else:  # the union of the splits, in order of first appearance
        entities, relations = [], []
        seen_e, seen_r = set(), set()
        for triples in splits.values():
            for h, r, t in triples:
                for x in (h, t):
                    if x not in seen_e:
                        seen_e.add(x)
                        entities.append(x)
                if r not in seen_r:
                    seen_r.add(r)
                    relations.append(r)
    entity_id = {e: i for i, e in enumerate(entities)}
    relation_id = {r: i for i, r in enumerate(relations)}
    arrays = {}
    for split, triples in splits.items():
        try:
            h = np.fromiter((entity_id[t[0]] for t in triples), np.int64, len(triples))
            r = np.fromiter((relation_id[t[1]] for t in triples), np.int64, len(triples))
            t_ = np.fromiter((entity_id[t[2]] for t in triples), np.int64, len(triples))
        except KeyError as e:
            raise PrepError(f"{root_path}: {split} names {e} which the dictionaries lack") from None
        arrays[split] = (h, r, t_)

    spec = GraphSpec(num_nodes=len(entities), num_relations=len(relations),
                     num_partitions=partitions, partitioning=partitioning, seed=seed, has_rel=True)
    writer = DatasetWriter(out, overwrite)
    try:
        chunks = lambda: (EdgeChunk(s, h, t, r) for s, (h, r, t) in arrays.items())  # noqa: E731
        total = sum(len(v[0]) for v in arrays.values())
        g = build_graph(writer, spec, chunks, total)
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
