"""scripts/sluice_prep.py: conversions checked against known statistics, the dataset invariants
of docs/format.md, the C++ reader (sluice info --verify), and bad input."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREP = ROOT / "scripts/sluice_prep.py"
DATASETS = pathlib.Path(os.environ.get("SLUICE_DATASETS", ROOT.parent / "shared/datasets"))


def prep(*args, check=True):
    proc = subprocess.run([sys.executable, str(PREP), *map(str, args)], capture_output=True,
                          text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def load(ds: pathlib.Path, role: str) -> np.ndarray:
    f = json.loads((ds / "manifest.json").read_text())["files"][role]
    return np.fromfile(ds / f["path"], dtype=f["dtype"]).reshape(f["shape"])


def names(ds: pathlib.Path, role: str) -> list[str]:
    offsets, data = load(ds, f"{role}.offsets"), load(ds, f"{role}.bytes").tobytes()
    return [data[offsets[k]:offsets[k + 1]].decode() for k in range(len(offsets) - 1)]


def check_buckets(ds: pathlib.Path, split: str) -> None:
    """Every edge of bucket (i, j) has its source in partition i and destination in j, sorted;
    and the destination-sorted copy holds the same edges."""
    m = json.loads((ds / "manifest.json").read_text())
    bounds = np.array(m["partitions"]["bounds"])
    p = len(bounds) - 1
    part = lambda ids: np.searchsorted(bounds, ids, side="right") - 1  # noqa: E731
    src, dst = load(ds, f"edges.{split}.src"), load(ds, f"edges.{split}.dst")
    off = load(ds, f"edges.{split}.buckets")
    assert off[0] == 0 and off[-1] == len(src) and np.all(np.diff(off) >= 0)
    for i in range(p):
        for j in range(p):
            a, b = off[i * p + j], off[i * p + j + 1]
            assert np.all(part(src[a:b]) == i) and np.all(part(dst[a:b]) == j)
            key = src[a:b].astype(np.int64) * (1 << 32) + dst[a:b]
            assert np.all(np.diff(key) >= 0), f"bucket ({i},{j}) not sorted by (src, dst)"
    by = f"edges.{split}.by_dst"
    if by + ".src" in m["files"]:
        bsrc, bdst, boff = load(ds, by + ".src"), load(ds, by + ".dst"), load(ds, by + ".buckets")
        for j in range(p):
            for i in range(p):
                a, b = boff[j * p + i], boff[j * p + i + 1]
                assert np.all(part(bdst[a:b]) == j) and np.all(part(bsrc[a:b]) == i)
        pairs = lambda s, d: np.sort(s.astype(np.int64) * (1 << 32) + d)  # noqa: E731
        assert np.array_equal(pairs(src, dst), pairs(bsrc, bdst))


def test_fb15k237_converts_with_known_statistics(tmp_path, sluice_bin):
    src = DATASETS / "fb15k-237"
    if not src.exists():
        pytest.skip(f"FB15k-237 not found at {src} (set SLUICE_DATASETS)")
    out = tmp_path / "fb"
    prep("kg", src, "--out", out, "--partitions", "4", "--seed", "3")
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["nodes"] == 14541 and m["counts"]["relations"] == 237
    assert m["counts"]["edges"] == {"train": 272115, "valid": 17535, "test": 20466}
    for split in ("train", "valid", "test"):
        check_buckets(out, split)
    # The names map renumbered ids back: the first training triple is in the dataset.
    entity, relation = names(out, "nodes.names"), names(out, "relations.names")
    import gzip
    with gzip.open(src / "train.txt.gz", "rt") as f:
        h, r, t = f.readline().rstrip("\r\n").split("\t")
    s, d, rel = load(out, "edges.train.src"), load(out, "edges.train.dst"), load(out, "edges.train.rel")
    hit = (s == entity.index(h)) & (d == entity.index(t)) & (rel == relation.index(r))
    assert hit.sum() == 1
    proc = subprocess.run([str(sluice_bin), "info", str(out), "--verify"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "checksums: all" in proc.stdout


def test_edge_list_with_header_crlf_string_ids_relations_and_weights(tmp_path, sluice_bin):
    edges = [("alice", "bob", "knows", 0.5), ("bob", "carol", "likes", 1.0),
             ("carol", "alice", "knows", 2.0), ("dave", "alice", "likes", 0.25)] * 5
    text = "source,target,relation,weight\r\n" + "".join(f"{a},{b},{r},{w}\r\n" for a, b, r, w in edges)
    path = tmp_path / "e.csv"
    path.write_bytes(text.encode())
    out = tmp_path / "ds"
    prep("edges", path, "--out", out, "--rel-col", "2", "--weight-col", "3", "--partitions", "2")
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["nodes"] == 4 and m["counts"]["relations"] == 2
    assert m["counts"]["edges"]["train"] == 20
    node, rel = names(out, "nodes.names"), names(out, "relations.names")
    got = sorted(zip((node[i] for i in load(out, "edges.train.src")),
                     (node[i] for i in load(out, "edges.train.dst")),
                     (rel[i] for i in load(out, "edges.train.rel")),
                     load(out, "edges.train.weight").tolist()))
    assert got == sorted(edges)
    check_buckets(out, "train")
    assert subprocess.run([str(sluice_bin), "info", str(out), "--verify"]).returncode == 0


def test_sparse_integer_ids_keep_their_originals_and_splits_are_seeded(tmp_path):
    rng = np.random.default_rng(0)
    ids = np.array([7, 1_000_000_007, 42, 5, 99_999])
    e = ids[rng.integers(0, len(ids), size=(3000, 2))]
    path = tmp_path / "e.tsv"
    path.write_text("".join(f"{a}\t{b}\n" for a, b in e))
    out1, out2 = tmp_path / "a", tmp_path / "b"
    for out in (out1, out2):
        prep("edges", path, "--out", out, "--valid-frac", "0.1", "--test-frac", "0.2",
             "--partitions", "3", "--seed", "9")
    m = json.loads((out1 / "manifest.json").read_text())
    assert sum(m["counts"]["edges"].values()) == 3000
    assert 150 < m["counts"]["edges"]["valid"] < 450 and 450 < m["counts"]["edges"]["test"] < 750
    original = load(out1, "nodes.original_ids")
    assert sorted(original.tolist()) == sorted(ids.tolist())
    pairs = []
    for split in ("train", "valid", "test"):
        check_buckets(out1, split) if split == "train" else None
        pairs += list(zip(original[load(out1, f"edges.{split}.src")].tolist(),
                          original[load(out1, f"edges.{split}.dst")].tolist()))
        assert np.array_equal(load(out1, f"edges.{split}.src"), load(out2, f"edges.{split}.src"))
    assert sorted(pairs) == sorted(map(tuple, e.tolist()))


def test_degree_partitioning_puts_hot_nodes_first(tmp_path):
    path = tmp_path / "g.tsv"
    prep("gen-graph", "--out", path, "--nodes", "2000", "--edges", "40000", "--seed", "1")
    out = tmp_path / "ds"
    prep("edges", path, "--out", out, "--partitions", "4", "--partitioning", "degree")
    deg = load(out, "nodes.out_degree") + load(out, "nodes.in_degree")
    assert np.all(np.diff(deg) <= 0), "ids are in descending degree order"
    assert deg.sum() == 2 * 40000
    check_buckets(out, "train")


def test_community_graph_has_communities_and_power_law_degrees(tmp_path):
    """gen-graph --kind community: with mixing 0.1 most edges stay inside a community (ids are
    permuted, so communities are found again by the generator's own seeded draw), degrees are
    heavy-tailed, and the same seed writes the same file."""
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    for path in (a, b):
        prep("gen-graph", "--kind", "community", "--out", path, "--nodes", "5000", "--edges", "60000",
             "--communities", "20", "--mixing", "0.1", "--seed", "3")
    assert a.read_bytes() == b.read_bytes()
    e = np.loadtxt(a, dtype=np.int64)
    assert e.shape == (60000, 2)
    deg = np.bincount(e.ravel(), minlength=5000)
    assert deg.max() > 20 * np.median(deg), "a power-law tail: hubs far above the median"
    # Recover each node's community from the generator: same seed, same draws.
    sys.path.insert(0, str(ROOT / "scripts"))
    from sluice_prep.generate import Communities
    rng = np.random.default_rng(3)
    blocks = Communities(rng, 5000, 20, 0.1)
    perm = rng.permutation(5000)
    community = np.empty(5000, dtype=np.int64)
    community[perm] = np.searchsorted(blocks.start, np.arange(5000), side="right") - 1
    inside = (community[e[:, 0]] == community[e[:, 1]]).mean()
    assert inside > 0.88, inside  # 90% drawn inside, plus the mixed edges that land inside
    bad = prep("gen-graph", "--kind", "community", "--out", tmp_path / "c.tsv", "--nodes", "10", "--edges", "5",
               "--communities", "11", check=False)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == (
        "sluice-prep: error: --communities must be between 1 and the node count, got 11")


def test_kg_graph_is_sparse_with_a_hierarchy_and_symmetric_relations(tmp_path):
    """gen-graph --kind kg: a WordNet-shaped graph: 11 relations, about two edges per entity, no
    self-loops or duplicate edges, r0 (child to parent) the largest relation and a forest (each
    child one parent), r1 and r2 symmetric (every edge also written the other way), the odd
    relations from r3 on pointing at no more than 20 hubs each; the same seed writes the same file."""
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    for path in (a, b):
        prep("gen-graph", "--kind", "kg", "--out", path, "--nodes", "20000", "--edges", "45000",
             "--seed", "2")
    assert a.read_bytes() == b.read_bytes()
    rows = [line.split("\t") for line in a.read_text().splitlines()]
    src = np.array([int(r[0]) for r in rows])
    dst = np.array([int(r[1]) for r in rows])
    rel = np.array([int(r[2][1:]) for r in rows])
    assert sorted(set(rel.tolist())) == list(range(11))
    assert 30000 < len(rows) <= 45000 and len(rows) / 20000 < 2.5
    assert not np.any(src == dst)
    triples = set(zip(src.tolist(), rel.tolist(), dst.tolist()))
    assert len(triples) == len(rows), "no duplicate edges"
    counts = np.bincount(rel)
    assert counts.argmax() == 0 and counts[0] > 0.4 * len(rows)
    children = src[rel == 0]
    assert len(set(children.tolist())) == len(children), "r0: one parent per child"
    for k in (1, 2):
        pairs = [(s_, d_) for s_, r_, d_ in triples if r_ == k]
        assert pairs and all((d_, k, s_) in triples for s_, d_ in pairs)
    for k in (3, 5, 7, 9):
        assert len(set(dst[rel == k].tolist())) <= 20
    # Its relations are the third column: `edges` reads them with --rel-col 2 and says so without.
    one = prep("edges", a, "--out", tmp_path / "one")
    assert (f"warning: {a}: column 2 holds text ('{rows[0][2]}') and is not read: every edge gets one "
            "relation; pass --rel-col 2 if it names relations") in one.stderr
    assert json.loads((tmp_path / "one/manifest.json").read_text())["counts"]["relations"] == 1
    eleven = prep("edges", a, "--out", tmp_path / "eleven", "--rel-col", "2")
    assert "warning" not in eleven.stderr
    assert json.loads((tmp_path / "eleven/manifest.json").read_text())["counts"]["relations"] == 11
    bad = prep("gen-graph", "--kind", "kg", "--out", tmp_path / "c.tsv", "--nodes", "100", "--edges", "200",
               "--relations", "1", check=False)
    assert bad.returncode == 1 and not (tmp_path / "c.tsv").exists()
    assert bad.stderr.strip().splitlines()[-1] == "sluice-prep: error: --kind kg needs at least 2 relations, got 1"


def test_malformed_line_stops_with_file_and_line_and_leaves_nothing(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("1\t2\n3\t4\n5\n6\t7\n")
    out = tmp_path / "ds"
    proc = prep("edges", path, "--out", out, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == (f"sluice-prep: error: {path}:3: expected at least 2 fields, got 1 "
                         "(pass --on-error skip to skip such lines)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv"], "no output, no temp dir"
    proc = prep("edges", path, "--out", out, "--on-error", "skip")
    assert "skipped 1 malformed lines" in proc.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["edges"]["train"] == 3 and m["stats"]["skipped_lines"] == 1


def test_other_bad_inputs_are_one_clear_line(tmp_path):
    path = tmp_path / "e.tsv"
    path.write_text("1\t2\n3\tx\n")
    proc = prep("edges", path, "--out", tmp_path / "o", "--ids", "int", check=False)
    assert "e.tsv:2: dst id 'x' is not an integer (use --ids str)" in proc.stderr
    proc = prep("edges", tmp_path / "missing.tsv", "--out", tmp_path / "o", check=False)
    assert proc.returncode == 1 and "missing.tsv: no such file" in proc.stderr
    (tmp_path / "exists").mkdir()
    path.write_text("1\t2\n")
    proc = prep("edges", path, "--out", tmp_path / "exists", check=False)
    assert "exists (pass --overwrite to replace it)" in proc.stderr
    proc = prep("edges", path, "--out", tmp_path / "o2", "--partitions", "5", check=False)
    assert "--partitions 5 must be in [1, 2]" in proc.stderr
    kg = tmp_path / "kg"
    kg.mkdir()
    (kg / "train.txt").write_text("a\tr\tb\nc\tr\n")
    proc = prep("kg", kg, "--out", tmp_path / "o3", check=False)
    assert "train.txt:2: expected 'head<TAB>relation<TAB>tail', got 2 fields" in proc.stderr


def test_help_explains_every_flag():
    proc = prep("edges", "--help")
    for flag in ("--delimiter", "--header", "--rel-col", "--weight-col", "--ids", "--valid-frac",
                 "--partitions", "--partitioning", "--on-error", "--overwrite"):
        assert flag in proc.stdout


@pytest.mark.parametrize("name,nodes,features,classes,directed_edges,nnz,train", [
    ("cora", 2708, 1433, 7, 10556, 49216, 140),
    ("citeseer", 3327, 3703, 6, 9104, 105165, 120),
])
def test_planetoid_converts_with_known_statistics(tmp_path, sluice_bin, name, nodes, features,
                                                   classes, directed_edges, nnz, train):
    src = DATASETS / name
    if not src.exists():
        pytest.skip(f"{name} not found at {src} (set SLUICE_DATASETS)")
    out = tmp_path / name
    prep("planetoid", src, "--dataset", name, "--out", out, "--partitions", "2")
    m = json.loads((out / "manifest.json").read_text())
    assert (m["counts"]["nodes"], m["counts"]["feature_dim"], m["counts"]["classes"]) == (nodes, features, classes)
    assert m["counts"]["edges"]["train"] == directed_edges
    x, y = load(out, "nodes.features"), load(out, "nodes.labels")
    assert x.shape == (nodes, features) and np.count_nonzero(x) == nnz
    splits = {s: load(out, f"nodes.{s}") for s in ("train", "valid", "test")}
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [train, 500, 1000]
    assert len(set().union(*(set(v.tolist()) for v in splits.values()))) == train + 1500
    assert np.all((y[splits["train"]] >= 0) & (y[splits["train"]] < classes))
    assert np.all(y[splits["test"]] >= 0), "every test node has a label"
    # Edges are symmetric: both directions of every undirected edge.
    s, d = load(out, "edges.train.src").astype(np.int64), load(out, "edges.train.dst")
    assert np.array_equal(np.sort(s * nodes + d), np.sort(d.astype(np.int64) * nodes + s))
    check_buckets(out, "train")
    assert subprocess.run([str(sluice_bin), "info", str(out), "--verify"],
                          capture_output=True).returncode == 0


def edge_set(ds: pathlib.Path, split: str) -> set[tuple[int, int]]:
    return set(zip(load(ds, f"edges.{split}.src").tolist(), load(ds, f"edges.{split}.dst").tolist()))


def test_undirected_edge_list_keeps_both_directions_in_one_split(tmp_path, sluice_bin):
    rng = np.random.default_rng(3)
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, 400, (3000, 2)) if a < b}
    listing = tmp_path / "g.tsv"
    listing.write_text("".join(f"{a}\t{b}\n" for a, b in sorted(pairs)))
    out = tmp_path / "u"
    prep("edges", listing, "--undirected", "--valid-frac", "0.1", "--test-frac", "0.1",
         "--partitions", "3", "--out", out)
    m = json.loads((out / "manifest.json").read_text())
    assert m["stats"]["undirected"] is True
    assert sum(m["counts"]["edges"].values()) == 2 * len(pairs)
    ids = load(out, "nodes.original_ids")
    split = {}
    for s in ("train", "valid", "test"):
        e = edge_set(out, s)
        assert e == {(d, c) for c, d in e}, f"{s}: an edge without its reverse"
        for c, d in e:
            split[(min(ids[c], ids[d]), max(ids[c], ids[d]))] = s
        check_buckets(out, s)
    assert set(split) == pairs, "every listed pair lands in exactly one split"
    assert 0.05 < sum(v == "test" for v in split.values()) / len(pairs) < 0.15
    assert subprocess.run([str(sluice_bin), "info", str(out), "--verify"],
                          capture_output=True).returncode == 0


@pytest.mark.parametrize("name,undirected_edges", [("cora", 5278), ("citeseer", 4552)])
def test_planetoid_citation_graph_for_link_prediction(tmp_path, sluice_bin, name, undirected_edges):
    src = DATASETS / name
    if not src.exists():
        pytest.skip(f"{name} not found at {src} (set SLUICE_DATASETS)")
    out = tmp_path / name
    prep("planetoid", src, "--dataset", name, "--task", "link", "--valid-frac", "0.05",
         "--test-frac", "0.1", "--partitions", "2", "--out", out)
    m = json.loads((out / "manifest.json").read_text())
    assert m["task"] == "link_prediction" and m["counts"]["feature_dim"] == 0
    assert sum(m["counts"]["edges"].values()) == 2 * undirected_edges
    assert 0.07 < m["counts"]["edges"]["test"] / (2 * undirected_edges) < 0.13
    train, test = edge_set(out, "train"), edge_set(out, "test")
    assert not train & test and all((d, c) in test for c, d in test)
    assert subprocess.run([str(sluice_bin), "info", str(out), "--verify"],
                          capture_output=True).returncode == 0


def test_planetoid_unpickler_refuses_arbitrary_objects(tmp_path):
    import pickle
    import shutil
    src = DATASETS / "cora"
    if not src.exists():
        pytest.skip(f"cora not found at {src}")
    for f in src.glob("ind.cora.*"):
        shutil.copy(f, tmp_path / f.name)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "ind.cora.graph").write_bytes(pickle.dumps(Evil()))
    proc = prep("planetoid", tmp_path, "--dataset", "cora", "--out", tmp_path / "o", check=False)
    assert proc.returncode == 1
    assert "refusing to unpickle posix.system" in proc.stderr
    assert not marker.exists()
    (tmp_path / "ind.cora.x").write_bytes(b"\x80\x02truncated")
    proc = prep("planetoid", tmp_path, "--dataset", "cora", "--out", tmp_path / "o", check=False)
    assert "not a readable Planetoid pickle" in proc.stderr


def records(ds: pathlib.Path, split: str) -> np.ndarray:
    sys.path.insert(0, str(ROOT / "scripts"))
    from sluice_prep.recsys import record_dtype
    m = json.loads((ds / "manifest.json").read_text())
    rec = record_dtype(m["record"]["sparse"], m["record"]["dense"])
    assert rec.itemsize == m["record"]["bytes"]
    return np.fromfile(ds / m["files"][f"samples.{split}"]["path"], dtype=rec)


def test_click_logs_convert_with_known_counts(tmp_path, sluice_bin):
    for name in ("criteo-sample", "avazu-sample", "movielens-100k"):
        if not (DATASETS / name).exists():
            pytest.skip(f"{name} not found under {DATASETS}")
    c, a, ml = DATASETS / "criteo-sample", DATASETS / "avazu-sample", DATASETS / "movielens-100k"
    prep("criteo", "--train", c / "train.csv", "--valid", c / "dev.csv", "--test", c / "test.csv",
         "--out", tmp_path / "criteo", "--min-count", "2")
    prep("avazu", "--train", a / "train.csv", "--valid", a / "dev.csv", "--test", a / "test.csv",
         "--out", tmp_path / "avazu")
    prep("movielens", ml, "--side-features", "--out", tmp_path / "ml")
    expect = {"criteo": {"train": 7200, "valid": 409, "test": 391},
              "avazu": {"train": 8087, "valid": 480, "test": 432},
              "ml": {"train": 80000, "test": 20000}}
    for ds, counts in expect.items():
        m = json.loads((tmp_path / ds / "manifest.json").read_text())
        assert m["counts"]["samples"] == counts
        assert subprocess.run([str(sluice_bin), "info", str(tmp_path / ds), "--verify"],
                              capture_output=True).returncode == 0
    av = {s: records(tmp_path / "avazu", s) for s in ("train", "valid", "test")}
    assert [int(av[s]["label"].sum()) for s in ("train", "valid", "test")] == [1397, 86, 80]
    # The first Criteo training line, decoded from its record.
    from sluice_prep.recsys import feature_hash
    first = (c / "train.csv").read_text().split("\n")[0].rstrip("\r").split("\t")
    r = records(tmp_path / "criteo", "train")[0]
    assert r["label"] == float(first[0])
    dense = [np.log(max(int(x), 0) + 1) if x else 0.0 for x in first[1:14]]
    assert np.allclose(r["dense"], dense)
    assert r["sparse"].tolist() == [feature_hash(k, x) for k, x in enumerate(first[14:])]
    rml = records(tmp_path / "ml", "train")
    assert rml["sparse"].shape == (80000, 6) and 0.5 < rml["label"].mean() < 0.6


def test_click_log_bad_input(tmp_path):
    good = "0\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["0a0b0c0d"] * 26)
    cases = {
        "columns": (good + "\t1", "expected 40 tab-separated fields"),
        "hex": (good.replace("0a0b0c0d", "zzzz", 1), "categorical feature C1 'zzzz' is not hex"),
        "label": ("2" + good[1:], "label '2' is not 0 or 1"),
    }
    for what, (line, message) in cases.items():
        path = tmp_path / f"{what}.tsv"
        path.write_text(good + "\n" + line + "\n")
        proc = prep("criteo", "--train", path, "--out", tmp_path / what, check=False)
        assert proc.returncode == 1
        assert f"{path}:2: {message}" in proc.stderr, proc.stderr
        assert not (tmp_path / what).exists()
        proc = prep("criteo", "--train", path, "--out", tmp_path / what, "--on-error", "skip")
        m = json.loads((tmp_path / what / "manifest.json").read_text())
        assert m["counts"]["samples"]["train"] == 1 and m["stats"]["skipped_lines"] == 1


def test_generated_click_log_records_its_planted_auc(tmp_path, sluice_bin):
    out = tmp_path / "clicks"
    prep("gen-clicks", "--out", out, "--samples", "20000", "--vocab", "5000", "--seed", "4")
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["samples"] == {"train": 18000, "test": 2000}
    assert 0.7 < m["stats"]["planted_test_auc"] <= 1.0
    train = records(out, "train")
    ids = train["sparse"][:, 0]
    _, counts = np.unique(ids, return_counts=True)
    assert counts.max() > 20 * np.median(counts), "ids are Zipf-skewed"
    again = tmp_path / "again"
    prep("gen-clicks", "--out", again, "--samples", "20000", "--vocab", "5000", "--seed", "4")
    assert np.array_equal(records(again, "test"), records(out, "test")), "seeded"
    assert subprocess.run([str(sluice_bin), "info", str(out), "--verify"],
                          capture_output=True).returncode == 0


def test_layout_numbers_each_tables_rows_by_descending_count(tmp_path, sluice_bin):
    src, out = tmp_path / "clicks", tmp_path / "laid"
    prep("gen-clicks", "--out", src, "--samples", "20000", "--vocab", "5000", "--seed", "4")
    prep("layout", src, "--out", out)
    m = json.loads((out / "manifest.json").read_text())
    rows = m["stats"]["layout"]["rows"]
    for split in ("train", "test"):
        before, after = records(src, split), records(out, split)
        assert np.array_equal(before["label"], after["label"]) and np.array_equal(before["dense"], after["dense"])
        for k in range(26):
            ids = load(out, f"layout.{k}.ids")
            # The map takes every row back to its id, and rows are dense per table.
            assert np.array_equal(ids[after["sparse"][:, k].astype(np.int64)], before["sparse"][:, k])
            assert after["sparse"][:, k].max() < rows[k] == len(ids) == len(np.unique(ids))
    train = records(out, "train")
    for k in (0, 13, 25):
        counts = np.bincount(train["sparse"][:, k].astype(np.int64), minlength=rows[k])
        seen = counts[counts > 0]
        assert np.all(np.diff(seen) <= 0), "train counts descend with the row number"
        assert np.all(counts[len(seen):] == 0), "rows of ids seen only in test come last"
        assert counts[0] == np.unique(records(src, "train")["sparse"][:, k], return_counts=True)[1].max()
    assert subprocess.run([str(sluice_bin), "info", str(out), "--verify"], capture_output=True).returncode == 0
    again = prep("layout", out, "--out", tmp_path / "twice", check=False)
    assert again.returncode == 0, "a laid-out log can be laid out again (rows stay in count order)"
    assert np.array_equal(records(tmp_path / "twice", "train")["sparse"][:, 0], train["sparse"][:, 0])
    bad = prep("layout", tmp_path / "missing", "--out", tmp_path / "x", check=False)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        f"sluice-prep: error: {tmp_path / 'missing'}: no manifest.json (not a sluice dataset)"]
    assert not (tmp_path / "x").exists()


def test_effect_decay_takes_the_signal_out_of_rare_values(tmp_path):
    flat, decayed = tmp_path / "flat", tmp_path / "decayed"
    prep("gen-clicks", "--out", flat, "--samples", "20000", "--vocab", "5000", "--seed", "4")
    prep("gen-clicks", "--out", decayed, "--samples", "20000", "--vocab", "5000", "--seed", "4",
         "--effect-decay", "2")
    m_flat = json.loads((flat / "manifest.json").read_text())["stats"]
    m_dec = json.loads((decayed / "manifest.json").read_text())["stats"]
    assert m_dec["effect_decay"] == 2 and m_flat["effect_decay"] == 0
    # Same ids, weaker effects for all but the most frequent values: less to predict.
    assert np.array_equal(records(flat, "test")["sparse"], records(decayed, "test")["sparse"])
    assert m_dec["planted_test_auc"] < m_flat["planted_test_auc"] - 0.03, (m_dec, m_flat)
    bad = prep("gen-clicks", "--out", tmp_path / "bad", "--samples", "100", "--effect-decay", "-1",
               check=False)
    assert bad.returncode != 0 and "effect-decay >= 0" in bad.stderr


def test_auc_matches_pairwise_definition():
    sys.path.insert(0, str(ROOT / "scripts"))
    from sluice_prep.gen_clicks import auc
    rng = np.random.default_rng(1)
    s = rng.integers(0, 5, 200).astype(float)  # many ties
    y = (rng.random(200) < 0.4).astype(float)
    pos, neg = s[y > 0.5], s[y < 0.5]
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum())
    assert auc(s, y) == pytest.approx(pairwise / (len(pos) * len(neg)))


def test_generated_node_classification_has_learnable_labels(tmp_path):
    out = tmp_path / "nc"
    prep("gen-nc", "--nodes", "3000", "--edges", "30000", "--features", "16", "--classes", "4",
         "--partitions", "2", "--out", out)
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["classes"] == 4 and m["counts"]["feature_dim"] == 16
    x, y = load(out, "nodes.features"), load(out, "nodes.labels")
    s, d = load(out, "edges.train.src"), load(out, "edges.train.dst")
    assert (y[s] == y[d]).mean() > 0.6, "edges mostly stay inside a class (homophily)"
    # A nearest-centroid classifier fit on train beats chance on test: features carry the label.
    train, test = load(out, "nodes.train"), load(out, "nodes.test")
    centroids = np.stack([x[train][y[train] == c].mean(0) for c in range(4)])
    pred = np.argmin(((x[test][:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (pred == y[test]).mean() > 0.5
    check_buckets(out, "train")


def test_generated_rows_are_a_pure_function_of_seed_and_original_id(tmp_path):
    """A node's features, label and split depend on (seed, original id) only: not on the node
    count, the renumbering or the chunk a row was generated in."""
    def by_original(out):
        orig = load(out, "nodes.original_ids")
        x, y = np.empty_like(load(out, "nodes.features")), np.empty(len(orig), np.int64)
        x[orig], y[orig] = load(out, "nodes.features"), load(out, "nodes.labels")
        in_train = np.zeros(len(orig), bool)
        in_train[orig[load(out, "nodes.train")]] = True
        return x, y, in_train
    prep("gen-nc", "--nodes", "3000", "--edges", "9000", "--features", "12", "--classes", "5",
         "--seed", "3", "--out", tmp_path / "a")
    prep("gen-nc", "--nodes", "70000", "--edges", "20000", "--features", "12", "--classes", "5",
         "--seed", "3", "--partitions", "3", "--partitioning", "degree", "--out", tmp_path / "b")
    xa, ya, ta = by_original(tmp_path / "a")
    xb, yb, tb = by_original(tmp_path / "b")
    assert np.array_equal(xa, xb[:3000]) and np.array_equal(ya, yb[:3000])
    assert np.array_equal(ta, tb[:3000])
    assert not np.array_equal(xb[3000:6000], xa), "rows differ between ids"


def test_generated_undirected_graph_and_split_fractions(tmp_path):
    out = tmp_path / "u"
    prep("gen-nc", "--nodes", "20000", "--edges", "50000", "--features", "4", "--undirected",
         "--train-frac", "0.3", "--valid-frac", "0.05", "--test-frac", "0.05", "--partitions", "2",
         "--out", out)
    s, d = load(out, "edges.train.src").astype(np.int64), load(out, "edges.train.dst").astype(np.int64)
    pairs = np.sort(s * (1 << 32) + d)
    assert np.array_equal(pairs, np.sort(d * (1 << 32) + s)), "every edge is stored both ways"
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["edges"]["train"] == len(s) and len(s) > 2 * 49000
    sizes = {k: len(load(out, f"nodes.{k}")) for k in ("train", "valid", "test")}
    assert abs(sizes["train"] / 20000 - 0.3) < 0.02 and abs(sizes["test"] / 20000 - 0.05) < 0.01
    deg = np.bincount(d, minlength=20000)
    assert deg.max() > 50 * np.median(deg), "hubs: a power-law degree"
    check_buckets(out, "train")
    bad = prep("gen-nc", "--nodes", "100", "--edges", "10", "--train-frac", "0.9", "--valid-frac",
               "0.2", "--out", tmp_path / "bad", check=False)
    assert bad.returncode == 1 and "split fractions" in bad.stderr and not (tmp_path / "bad").exists()


def test_ogb_folder_and_npy_inputs(tmp_path, sluice_bin):
    import gzip
    ogb = tmp_path / "ogbn-tiny"
    (ogb / "raw").mkdir(parents=True)
    (ogb / "split" / "random").mkdir(parents=True)
    rng = np.random.default_rng(0)
    n = 50
    e = rng.integers(0, n, (200, 2))
    gz = lambda p, rows: gzip.open(p, "wt").write("".join(",".join(map(str, r)) + "\n" for r in rows))  # noqa: E731
    gz(ogb / "raw/edge.csv.gz", e.tolist())
    gz(ogb / "raw/node-feat.csv.gz", rng.random((n, 3)).round(4).tolist())
    gz(ogb / "raw/node-label.csv.gz", [[int(v)] for v in rng.integers(0, 3, n)])
    for s, ids in (("train", range(0, 30)), ("valid", range(30, 40)), ("test", range(40, 50))):
        gz(ogb / f"split/random/{s}.csv.gz", [[i] for i in ids])
    prep("ogb", ogb, "--out", tmp_path / "o", "--partitions", "2")
    m = json.loads((tmp_path / "o/manifest.json").read_text())
    assert m["counts"]["nodes"] == n and m["counts"]["edges"]["train"] == 200
    assert subprocess.run([str(sluice_bin), "info", str(tmp_path / "o"), "--verify"],
                          capture_output=True).returncode == 0
    # A feature row of another width is named by file and line.
    gz(ogb / "raw/node-feat.csv.gz", [[0.1, 0.2, 0.3]] * 4 + [[0.1, 0.2]] + [[0.1, 0.2, 0.3]] * 45)
    proc = prep("ogb", ogb, "--out", tmp_path / "o2", check=False)
    assert "node-feat.csv.gz:5: 2 values, expected 3" in proc.stderr

    np.save(tmp_path / "x.npy", rng.random((n, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 2, n))
    (tmp_path / "e.txt").write_text("".join(f"{a} {b}\n" for a, b in e))
    prep("npy", "--edges", tmp_path / "e.txt", "--features", tmp_path / "x.npy", "--labels",
         tmp_path / "y.npy", "--out", tmp_path / "n")
    x_orig = np.load(tmp_path / "x.npy")
    order = load(tmp_path / "n", "nodes.original_ids")
    assert np.array_equal(load(tmp_path / "n", "nodes.features"), x_orig[order])
    np.save(tmp_path / "y_short.npy", np.zeros(n - 1, dtype=np.int64))
    proc = prep("npy", "--edges", tmp_path / "e.txt", "--features", tmp_path / "x.npy",
                "--labels", tmp_path / "y_short.npy", "--out", tmp_path / "n2", check=False)
    assert f"has {n - 1} rows but" in proc.stderr
    (tmp_path / "e_bad.txt").write_text(f"0 1\n2 {n}\n")
    proc = prep("npy", "--edges", tmp_path / "e_bad.txt", "--features", tmp_path / "x.npy",
                "--labels", tmp_path / "y.npy", "--out", tmp_path / "n3", check=False)
    assert f"node id {n} is out of range [0, {n})" in proc.stderr


def test_interrupted_run_leaves_no_output(tmp_path):
    import signal
    import time
    path = tmp_path / "g.tsv"
    prep("gen-graph", "--out", path, "--nodes", "100000", "--edges", "3000000")
    out = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, str(PREP), "edges", str(path), "--out", str(out)],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("ds.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; no output was written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.tsv"]


def test_content_checks_are_recorded_and_verified(tmp_path, sluice_bin):
    """Preprocessing records each id array's range and each float array's finiteness in the
    manifest; sluice info --verify reads every value again and reports what it checked."""
    prep("gen-nc", "--nodes", 400, "--edges", 3000, "--features", 8, "--classes", 4, "--seed", 3,
         "--partitions", 2, "--out", tmp_path / "nc")
    m = json.loads((tmp_path / "nc/manifest.json").read_text())
    n = m["counts"]["nodes"]
    for role in ("edges.train.src", "edges.train.dst", "nodes.train", "nodes.labels"):
        lo, hi = m["files"][role]["range"]
        values = load(tmp_path / "nc", role)
        assert (lo, hi) == (values.min(), values.max()), role
    assert m["files"]["edges.train.src"]["range"][1] < n
    assert m["files"]["nodes.features"]["finite"] is True
    out = subprocess.run([str(sluice_bin), "info", str(tmp_path / "nc"), "--verify"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert "content: ids of 8 arrays within their counts, 1 float arrays finite" in out.stdout, out.stdout


def test_the_writer_refuses_an_id_beyond_its_count_and_leaves_nothing(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from sluice_prep.writer import DatasetWriter, PrepError
    w = DatasetWriter(tmp_path / "out")
    w.put("edges.train.src", "e/src.bin", np.array([0, 3, 9], dtype=np.int32))
    w.put("nodes.features", "n/f.bin", np.ones((9, 2), dtype=np.float32))
    with pytest.raises(PrepError, match=r"edges.train.src: id 9 is outside \[0, 9\) \(counts.nodes\)"):
        try:
            w.commit({"task": "node_classification", "counts": {"nodes": 9}})
        except PrepError:
            w.abort()
            raise
    assert not list(tmp_path.iterdir())
    w = DatasetWriter(tmp_path / "out2")
    f = w.array("nodes.features", "n/f.bin", np.float32, 3)
    f.append(np.ones((4, 3), dtype=np.float32))
    with pytest.raises(PrepError, match=r"n/f.bin: row 5, column 1 is not finite"):
        f.append(np.array([[1, 1, 1], [1, np.inf, 1]], dtype=np.float32))
    w.abort()
