"""The bad-input corpus: configs and --set, command lines, dataset manifests and files, raw inputs
to sluice_prep.py, numeric values, run directories and checkpoints. Every case must end in one
line, `sluice: error: ...` or `sluice-prep: error: ...`, containing the substring the case names
(the key, path, field or line), with a non-zero exit, no stack or traceback, the dataset and any
refused run directory unchanged (hashed before and after), and no temporary file left behind."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import ROOT, run

PY = sys.executable if "numpy" in sys.modules else "/usr/bin/python3"
PREP = [PY, str(ROOT / "scripts/sluice_prep.py")]
STACK_MARKS = ("Traceback", "frame #", "terminate called", "Exception raised from", "core dumped")


def tree_hash(path: pathlib.Path) -> str:
    """Names and bytes of every file under `path` (absent: a fixed value). A run directory's
    `lock` is left out: it records the pid of the last process that held it."""
    h = hashlib.sha256()
    if not path.exists():
        return "absent"
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    for p in sorted(path.rglob("*")):
        if p.name == "lock":
            continue
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def temporaries(*roots: pathlib.Path) -> list[pathlib.Path]:
    found = []
    for root in roots:
        if root.is_dir():
            found += [p for p in root.rglob("*") if ".tmp" in p.name]
    return found


def assert_one_line_error(out: subprocess.CompletedProcess, program: str, expect: str) -> None:
    err = out.stderr
    assert out.returncode != 0, f"exit 0; stdout: {out.stdout[-300:]} stderr: {err[-300:]}"
    for mark in STACK_MARKS:
        assert mark not in err, f"a stack or traceback ({mark}): {err[-600:]}"
    lines = [l for l in err.splitlines() if l.startswith(f"{program}: error:")]
    assert len(lines) == 1, f"expected one '{program}: error:' line, got: {err[-600:]}"
    assert expect in lines[0], f"'{expect}' not in: {lines[0]}"


# ---------------------------------------------------------------------------------------------
# Fixtures: a small link-prediction dataset (2 relations, 4 partitions, valid and test edges), a
# run trained on it for one epoch (checkpoints), and a small click log.

@pytest.fixture(scope="module")
def lp_ds(tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("bad-lp")
    rng = np.random.default_rng(3)
    n, m = 600, 6000
    src, dst, rel = rng.integers(0, n, m), rng.integers(0, n, m), rng.integers(0, 2, m)
    (d / "g.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in zip(src, rel, dst)))
    out = subprocess.run(PREP + ["edges", str(d / "g.tsv"), "--out", str(d / "ds"), "--partitions", "4",
                                 "--src-col", "0", "--rel-col", "1", "--dst-col", "2",
                                 "--valid-frac", "0.05", "--test-frac", "0.05"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return d / "ds"


def lp_config(ds: pathlib.Path, run_dir: pathlib.Path, extra: str = "") -> str:
    return (f"dataset: {ds}\nrun_dir: {run_dir}\nprogress: false\n"
            "model: {decoder: distmult, dim: 8}\ntrain: {epochs: 1, batch: 500, chunks: 2, negatives: 20}\n"
            "eval: {every: 1, max_edges: 100}\n" + extra)


@pytest.fixture(scope="module")
def trained(sluice_bin, lp_ds, tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("bad-run")
    cfg = d / "c.yaml"
    cfg.write_text(lp_config(lp_ds, d / "run"))
    out = run(sluice_bin, "train", str(cfg))
    assert out.returncode == 0, out.stderr
    return d / "run"


@pytest.fixture(scope="module")
def clicks(tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("bad-rec")
    out = subprocess.run(PREP + ["gen-clicks", "--samples", "3000", "--sparse", "3", "--dense", "2",
                                 "--vocab", "500", "--seed", "1", "--test-frac", "0.1", "--out", str(d / "ds")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return d / "ds"


# ---------------------------------------------------------------------------------------------
# Configs and --set: (id, text appended to or replacing the config, --set arguments, expected).

BASE = "BASE"
CONFIG_CASES = [
    ("unknown-key", BASE + "bogus: 1\n", [], "unknown key 'bogus'"),
    ("unknown-nested-key", BASE + "io: {depth: 3}\n", [], "io.depth"),
    ("duplicate-key", BASE + "model: {dim: 4}\n", [], "duplicate key 'model'"),
    ("malformed-yaml", BASE + "train: [1, 2\n", [], "malformed YAML"),
    ("tab-indent", "\tdataset: x\n", [], "malformed YAML"),
    ("latin-1-bytes", BASE + "run_dir: caf\xe9\n", [], "not UTF-8 text (byte 0xe9 at line"),
    ("empty-config", "", [], "dataset"),
    ("scalar-config", "just text\n", [], "c.yaml"),
    ("list-config", "- a\n- b\n", [], "c.yaml"),
    ("section-not-map", BASE + "storage: 5\n", [], "storage"),
    ("enum-bad", BASE, ["model.decoder=rescal"], "model.decoder"),
    ("set-no-equals", BASE, ["nokey"], "expected key=value"),
    ("set-empty-key", BASE, ["=3"], "expected key=value"),
    ("set-unknown", BASE, ["train.nokey=1"], "train.nokey"),
    ("set-unknown-section", BASE, ["nosection.x=1"], "nosection.x"),
    ("set-section-scalar", BASE, ["train=3"], "train"),
    ("number-text", BASE, ["train.lr=abc"], "train.lr"),
    ("integer-float", BASE, ["train.batch=1.5"], "train.batch"),
    ("bool-bad", BASE, ["progress=maybe"], "progress"),
    ("bytes-bad", BASE, ["storage.budget=abc"], "storage.budget"),
    ("bytes-unit", BASE, ["storage.budget=12parsecs"], "storage.budget"),
    ("task-unknown", BASE + "task: regression\n", [], "task"),
    ("dataset-missing", BASE, ["dataset=/nonexistent/sluice-ds"], "/nonexistent/sluice-ds"),
    ("dataset-is-file", BASE, ["dataset=/etc/hostname"], "/etc/hostname"),
    ("complex-odd-dim", BASE, ["model.decoder=complex", "model.dim=7"], "even"),
    ("all-with-margin-loss", BASE, ["train.scoring=all", "train.loss=ranking"], "train.loss"),
    ("run-dir-empty", BASE, ["run_dir="], "run_dir"),
    ("ordering-bad", BASE, ["train.ordering=zigzag"], "train.ordering"),
    ("device-bad", BASE, ["device.type=tpu"], "device.type"),
]

# Numeric values: NaN, infinities, huge, negative, zero where it makes no sense.
NUMERIC_CASES = [
    ("lr-nan", ["train.lr=nan"], "train.lr"),
    ("lr-inf", ["train.lr=inf"], "train.lr"),
    ("lr-neg-inf", ["train.lr=-inf"], "train.lr"),
    ("lr-negative", ["train.lr=-0.1"], "train.lr"),
    ("lr-overflow", ["train.lr=1e400"], "train.lr"),
    ("dim-zero", ["model.dim=0"], "model.dim"),
    ("dim-huge", ["model.dim=100000000"], "model.dim"),
    ("dim-negative", ["model.dim=-8"], "model.dim"),
    ("batch-zero", ["train.batch=0"], "train.batch"),
    ("batch-huge", ["train.batch=99999999999999999999"], "train.batch"),
    ("epochs-negative", ["train.epochs=-1"], "train.epochs"),
    ("negatives-zero", ["train.negatives=0"], "train.negatives"),
    ("chunks-zero", ["train.chunks=0"], "train.chunks"),
    ("smoothing-one", ["train.label_smoothing=1.5"], "train.label_smoothing"),
    ("smoothing-nan", ["train.label_smoothing=nan"], "train.label_smoothing"),
    ("relation-prediction-negative", ["train.relation_prediction=-1"], "train.relation_prediction"),
    ("dropout-one", ["model.entity_dropout=1.0"], "model.entity_dropout"),
    ("dropout-negative", ["model.relation_dropout=-0.2"], "model.relation_dropout"),
    ("budget-negative", ["storage.budget=-5GiB"], "storage.budget"),
    ("budget-nan", ["storage.budget=nanGiB"], "storage.budget"),
    ("max-minutes-negative", ["train.max_minutes=-3"], "train.max_minutes"),
    ("patience-negative", ["eval.patience=-1"], "eval.patience"),
    ("seed-negative", ["train.seed=-1"], "train.seed"),
    ("queue-depth-negative", ["io.queue_depth=-1"], "io.queue_depth"),
    ("queue-depth-huge", ["io.queue_depth=4097"], "io.queue_depth"),
    ("regularization-nan", ["train.regularization=nan"], "train.regularization"),
]


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config(sluice_bin, lp_ds, tmp_path, case):
    name, text, sets, expect = case
    before = tree_hash(lp_ds)
    cfg = tmp_path / "c.yaml"
    text = text.replace(BASE, lp_config(lp_ds, tmp_path / "run"))
    cfg.write_bytes(text.encode("latin-1" if name == "latin-1-bytes" else "utf-8"))
    out = run(sluice_bin, "train", str(cfg), *[a for s in sets for a in ("--set", s)])
    assert_one_line_error(out, "sluice", expect)
    assert tree_hash(lp_ds) == before and not temporaries(tmp_path, lp_ds)


@pytest.mark.parametrize("case", NUMERIC_CASES, ids=[c[0] for c in NUMERIC_CASES])
def test_numeric(sluice_bin, lp_ds, tmp_path, case):
    _, sets, expect = case
    cfg = tmp_path / "c.yaml"
    cfg.write_text(lp_config(lp_ds, tmp_path / "run"))
    out = run(sluice_bin, "train", str(cfg), *[a for s in sets for a in ("--set", s)])
    assert_one_line_error(out, "sluice", expect)
    assert not (tmp_path / "run").exists(), "a refused config created its run directory"


# ---------------------------------------------------------------------------------------------
# Command lines: {cfg} is a valid config, {ds} the dataset, {run} a trained run, {tmp} a folder.

CLI_CASES = [
    ("no-command", [], "subcommand"),
    ("unknown-command", ["frobnicate"], "frobnicate"),
    ("train-no-config", ["train"], "CONFIG"),
    ("train-missing-config", ["train", "{tmp}/missing.yaml"], "missing.yaml"),
    ("train-config-is-dir", ["train", "{tmp}"], "is a directory"),
    ("train-unknown-flag", ["train", "{cfg}", "--bogus"], "--bogus"),
    ("train-resume-and-overwrite", ["train", "{cfg}", "--resume", "--overwrite"], "--overwrite"),
    ("train-binary-config", ["train", "/bin/ls"], "/bin/ls"),
    ("eval-no-run", ["eval"], "RUN_DIR"),
    ("eval-missing-run", ["eval", "{tmp}/nothing"], "nothing"),
    ("eval-bad-split", ["eval", "{run}", "--split", "holdout"], "holdout"),
    ("eval-bad-checkpoint", ["eval", "{run}", "--checkpoint", "epoch-99-step-0"], "epoch-99-step-0"),
    ("export-no-out", ["export", "{run}"], "--out"),
    ("export-out-under-file", ["export", "{run}", "--out", "/etc/hostname/x"], "/etc/hostname"),
    ("predict-no-head", ["predict", "{run}"], "--head"),
    ("predict-head-out-of-range", ["predict", "{run}", "--head", "999999", "--relation", "0"], "999999"),
    ("predict-relation-out-of-range", ["predict", "{run}", "--head", "1", "--relation", "77"], "77"),
    ("info-missing", ["info", "{tmp}/nothing"], "nothing"),
    ("info-not-dataset", ["info", "{tmp}"], "manifest.json"),
    ("info-no-arg", ["info"], "DATASET"),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_command_line(sluice_bin, lp_ds, trained, tmp_path, case):
    _, args, expect = case
    cfg = tmp_path / "c.yaml"
    cfg.write_text(lp_config(lp_ds, tmp_path / "run"))
    before = tree_hash(trained)
    subs = {"{cfg}": str(cfg), "{ds}": str(lp_ds), "{run}": str(trained), "{tmp}": str(tmp_path)}
    for k, v in subs.items():
        args = [a.replace(k, v) for a in args]
    out = run(sluice_bin, *args)
    assert_one_line_error(out, "sluice", expect)
    assert tree_hash(trained) == before and not temporaries(trained, tmp_path)


# ---------------------------------------------------------------------------------------------
# Dataset manifests and files: each case damages a copy of the dataset; training it must stop
# before any epoch with one line naming the file or field.

def damaged_copy(dataset: pathlib.Path, d: pathlib.Path, mutate) -> pathlib.Path:
    """A copy of the dataset, damaged by mutate(dir, manifest); the manifest is written back
    unless mutate returns False (it replaced or removed the file itself)."""
    shutil.copytree(dataset, d)
    m = json.loads((d / "manifest.json").read_text())
    if mutate(d, m) is not False:
        (d / "manifest.json").write_text(json.dumps(m))
    return d


def _file(m, role):
    return m["files"][role]


def _rewrite(d: pathlib.Path, m: dict, role: str, fn) -> None:
    """Rewrites an array file through fn and fixes its CRC (content damage the CRC misses)."""
    f = _file(m, role)
    dtype = {"int32": np.int32, "int64": np.int64}[f["dtype"]]
    a = np.fromfile(d / f["path"], dtype=dtype)
    fn(a)
    a.tofile(d / f["path"])
    f["crc32"] = f"{zlib.crc32(a.tobytes()) & 0xffffffff:08x}"


def _replace_manifest(d: pathlib.Path, text: str) -> bool:
    (d / "manifest.json").write_text(text)
    return False  # not rewritten from the parsed manifest


def _truncate(d, m, role, keep=-7):
    p = d / _file(m, role)["path"]
    p.write_bytes(p.read_bytes()[:keep])


def _flip(d, m, role):
    p = d / _file(m, role)["path"]
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x40
    p.write_bytes(bytes(b))


DATASET_CASES = [
    ("manifest-missing", lambda d, m: (d / "manifest.json").unlink() or False, "manifest.json"),
    ("manifest-not-json", lambda d, m: _replace_manifest(d, "{nope"), "manifest.json"),
    ("manifest-empty", lambda d, m: _replace_manifest(d, ""), "manifest.json"),
    ("manifest-array", lambda d, m: _replace_manifest(d, "[1, 2]"), "manifest.json"),
    ("manifest-binary", lambda d, m: _replace_manifest(d, "\x00\x01\x02"), "manifest.json"),
    ("format-other", lambda d, m: m.update(format="other"), "format"),
    ("format-newer", lambda d, m: m.update(format_version=999), "format version 999"),
    ("task-unknown", lambda d, m: m.update(task="regression"), "regression"),
    ("task-mismatch", lambda d, m: m.update(task="recommendation"), "record"),
    ("counts-missing", lambda d, m: m.pop("counts"), "counts"),
    ("nodes-wrong-type", lambda d, m: m["counts"].update(nodes="many"), "nodes"),
    ("nodes-negative", lambda d, m: m["counts"].update(nodes=-3), "nodes"),
    ("nodes-disagree-bounds", lambda d, m: m["counts"].update(nodes=m["counts"]["nodes"] + 5), "counts.nodes"),
    ("train-count-disagrees", lambda d, m: m["counts"]["edges"].update(train=5), "5 edges"),
    ("bounds-short", lambda d, m: m["partitions"].update(bounds=[0], count=0), "partitions"),
    ("bounds-decreasing", lambda d, m: m["partitions"]["bounds"].__setitem__(2, 1), "partitions.bounds"),
    ("partition-count", lambda d, m: m["partitions"].update(count=7), "partitions.count"),
    ("files-missing", lambda d, m: m.pop("files"), "files"),
    ("files-not-object", lambda d, m: m.update(files=[1]), "files"),
    ("role-missing", lambda d, m: m["files"].pop("edges.train.src"), "edges.train.src"),
    ("file-missing", lambda d, m: (d / _file(m, "edges.train.dst")["path"]).unlink(), "train_dst.bin"),
    ("file-truncated", lambda d, m: _truncate(d, m, "edges.train.dst"), "truncated"),
    ("file-empty", lambda d, m: _truncate(d, m, "edges.train.src", 0), "train_src.bin"),
    ("file-longer", lambda d, m: (d / _file(m, "edges.train.dst")["path"]).open("ab").write(b"xx"), "train_dst.bin"),
    ("dtype-unknown", lambda d, m: _file(m, "edges.train.dst").update(dtype="int13"), "int13"),
    ("dtype-float", lambda d, m: _file(m, "edges.train.dst").update(dtype="float32"), "edges.train.dst"),
    ("shape-disagrees", lambda d, m: _file(m, "edges.train.dst").update(shape=[3]), "edges.train.dst"),
    ("bytes-disagree", lambda d, m: _file(m, "edges.train.dst").update(bytes=12), "edges.train.dst"),
    ("path-escapes", lambda d, m: _file(m, "edges.train.dst").update(path="../../etc/passwd"), "path"),
    ("path-absolute", lambda d, m: _file(m, "edges.train.dst").update(path="/etc/passwd"), "path"),
    ("crc-malformed", lambda d, m: _file(m, "edges.train.dst").update(crc32="zz"), "crc32"),
    ("train-id-out-of-range", lambda d, m: _rewrite(d, m, "edges.train.dst", lambda a: a.__setitem__(3, 10**6)),
     "out of range"),
    ("train-id-negative", lambda d, m: _rewrite(d, m, "edges.train.src", lambda a: a.__setitem__(0, -4)),
     "out of range"),
    ("valid-id-out-of-range", lambda d, m: _rewrite(d, m, "edges.valid.dst", lambda a: a.__setitem__(5, 10**6)),
     "edges.valid.dst[5]"),
    ("test-id-negative", lambda d, m: _rewrite(d, m, "edges.test.src", lambda a: a.__setitem__(1, -1)),
     "edges.test.src[1]"),
    ("valid-relation-out-of-range", lambda d, m: _rewrite(d, m, "edges.valid.rel", lambda a: a.__setitem__(0, 9)),
     "edges.valid.rel[0]"),
    ("range-beyond-nodes", lambda d, m: _file(m, "edges.train.src").update(range=[0, m["counts"]["nodes"] + 5]),
     "files.edges.train.src.range"),
    ("range-malformed", lambda d, m: _file(m, "edges.valid.dst").update(range=[7]), "edges.valid.dst.range"),
    ("range-reversed", lambda d, m: _file(m, "edges.test.rel").update(range=[3, 1]), "edges.test.rel.range"),
    ("finite-not-bool", lambda d, m: _file(m, "edges.test.rel").update(finite="maybe"), "finite"),
    ("buckets-disagree", lambda d, m: _rewrite(d, m, "edges.train.buckets", lambda a: a.__setitem__(-1, a[-1] + 3)),
     "buckets"),
]


@pytest.mark.parametrize("case", DATASET_CASES, ids=[c[0] for c in DATASET_CASES])
def test_dataset(sluice_bin, lp_ds, tmp_path, case):
    name, mutate, expect = case
    # Training edges are checked as each buffer state is read: such a run has begun.
    train_damaged(sluice_bin, lp_ds, tmp_path, mutate, expect, lp_config, began=name.startswith("train-id"))


def train_damaged(sluice_bin, ds, tmp_path, mutate, expect, config, began: bool) -> None:
    """Trains on a damaged copy of `ds`: one line naming `expect`, before the first epoch ends,
    the copy unchanged, no temporary, and (unless the run had `began`) no run directory left."""
    d = damaged_copy(ds, tmp_path / "ds", mutate)
    before = tree_hash(d)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config(d, tmp_path / "run"))
    out = run(sluice_bin, "train", str(cfg))
    assert_one_line_error(out, "sluice", expect)
    assert "epoch 1" not in out.stdout, "the damage was found only after an epoch"
    assert tree_hash(d) == before and not temporaries(d, tmp_path)
    if not began:
        assert not (tmp_path / "run").exists(), "a refused run left its new run directory behind"


def test_verify_finds_a_flipped_bit(sluice_bin, lp_ds, tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(lp_ds, d)
    _flip(d, json.loads((d / "manifest.json").read_text()), "edges.train.dst")
    out = run(sluice_bin, "info", str(d), "--verify")
    assert_one_line_error(out, "sluice", "checksum mismatch")


def test_verify_finds_an_id_beyond_its_count(sluice_bin, lp_ds, tmp_path):
    """A valid edge's id past counts.nodes, with its CRC made to match: verify reads the values."""
    d = damaged_copy(lp_ds, tmp_path / "ds", lambda d, m: _rewrite(
        d, m, "edges.valid.dst", lambda a: a.__setitem__(5, 10**6)))
    out = run(sluice_bin, "info", str(d), "--verify")
    assert_one_line_error(out, "sluice", "(edges.valid.dst): value 1000000 at index 5 is outside [0, ")
    assert "(counts.nodes)" in out.stderr


def test_verify_finds_values_the_recorded_range_does_not_cover(sluice_bin, lp_ds, tmp_path):
    def narrow(d, m):
        f = _file(m, "edges.train.rel")
        f["range"] = [f["range"][0], f["range"][1] - 1]
    d = damaged_copy(lp_ds, tmp_path / "ds", narrow)
    assert run(sluice_bin, "info", str(d)).returncode == 0  # the recorded range is within its count
    out = run(sluice_bin, "info", str(d), "--verify")
    assert_one_line_error(out, "sluice", "but the manifest records range")


# Node classification: a generated graph with planted classes, 1 partition; the same checks.

@pytest.fixture(scope="module")
def nc_ds(tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("bad-nc")
    out = subprocess.run(PREP + ["gen-nc", "--nodes", "600", "--edges", "4000", "--features", "8", "--classes", "3",
                                 "--seed", "2", "--partitions", "1", "--out", str(d / "ds")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return d / "ds"


def nc_config(ds: pathlib.Path, run_dir: pathlib.Path) -> str:
    return (f"task: node_classification\ndataset: {ds}\nrun_dir: {run_dir}\nprogress: false\n"
            "model: {kind: graphsage, layers: 2, hidden: 8, fanouts: [3, 3]}\n"
            "train: {epochs: 1, batch: 64}\neval: {every: 1, fanouts: [3, 3]}\n")


def _rewrite_float(d: pathlib.Path, m: dict, role: str, fn) -> None:
    f = _file(m, role)
    a = np.fromfile(d / f["path"], dtype=np.float32)
    fn(a)
    a.tofile(d / f["path"])
    f["crc32"] = f"{zlib.crc32(a.tobytes()) & 0xffffffff:08x}"
    f.pop("finite", None)


NC_DATASET_CASES = [
    ("features-missing", lambda d, m: m["files"].pop("nodes.features"), "nodes.features"),
    ("features-truncated", lambda d, m: _truncate(d, m, "nodes.features", -16), "truncated"),
    ("features-width", lambda d, m: m["counts"].update(feature_dim=9), "feature"),
    ("features-dtype", lambda d, m: _file(m, "nodes.features").update(dtype="int32"), "nodes.features"),
    ("features-nan", lambda d, m: _rewrite_float(d, m, "nodes.features", lambda a: a.__setitem__(17, np.nan)),
     "feature 1 is nan"),
    ("labels-missing", lambda d, m: m["files"].pop("nodes.labels"), "nodes.labels"),
    ("labels-beyond-classes", lambda d, m: _rewrite(d, m, "nodes.labels", lambda a: a.__setitem__(4, 7)), "nodes.labels"),
    ("labels-range-recorded", lambda d, m: _file(m, "nodes.labels").update(range=[-1, 5]), "counts.classes"),
    ("classes-zero", lambda d, m: m["counts"].update(classes=0), "classes"),
    ("train-split-missing", lambda d, m: m["files"].pop("nodes.train"), "nodes.train"),
    ("train-split-out-of-range", lambda d, m: _rewrite(d, m, "nodes.train", lambda a: a.__setitem__(2, 10**6)),
     "nodes.train"),
    ("valid-split-negative", lambda d, m: _rewrite(d, m, "nodes.valid", lambda a: a.__setitem__(0, -3)), "nodes.valid"),
    ("split-range-recorded", lambda d, m: _file(m, "nodes.test").update(range=[0, 600]), "files.nodes.test.range"),
    ("graph-dst-out-of-range", lambda d, m: _rewrite(d, m, "edges.train.by_dst.src", lambda a: a.__setitem__(9, 10**6)),
     "edges.train"),
]


@pytest.mark.parametrize("case", NC_DATASET_CASES, ids=[c[0] for c in NC_DATASET_CASES])
def test_node_classification_dataset(sluice_bin, nc_ds, tmp_path, case):
    name, mutate, expect = case
    # Feature rows are checked as they are read (and by --verify): such a run has begun.
    train_damaged(sluice_bin, nc_ds, tmp_path, mutate, expect, nc_config, began=name == "features-nan")


# ---------------------------------------------------------------------------------------------
# Raw inputs to sluice_prep.py: (id, file name, bytes, extra arguments, expected). The input is
# written to a fresh folder; --out is that folder's "out" unless the arguments name another.

def _gz(text: bytes) -> bytes:
    return gzip.compress(text)


def _edges_text(n: int = 20000) -> bytes:
    """Random integer edges: a gzip of them is long enough to cut short."""
    rng = np.random.default_rng(1)
    return "".join(f"{a}\t{b}\n" for a, b in rng.integers(0, 10**6, (n, 2))).encode()


def _triples_text(n: int = 20000) -> bytes:
    rng = np.random.default_rng(2)
    return "".join(f"e{a}\tr{r}\te{b}\n" for a, r, b in rng.integers(0, 10**5, (n, 3))).encode()


PREP_CASES = [
    ("not-utf8", "g.tsv", b"1\t2\n\xff\xfe\t3\n", [], "g.tsv:2: not UTF-8"),
    ("latin1-name", "g.tsv", "a\tb\nc\t\xe9\n".encode("latin-1"), ["--ids", "str"], "g.tsv:2"),
    ("utf16", "g.tsv", "1\t2\n3\t4\n".encode("utf-16"), [], "not UTF-8"),
    ("fake-gzip", "g.tsv.gz", b"plain text, not gzip", [], "not a valid gzip file"),
    ("truncated-gzip", "g.tsv.gz", _gz(_edges_text())[:30000], [], "truncated"),
    ("empty-gzip", "g.tsv.gz", _gz(b""), [], "empty edge list"),
    ("empty-file", "g.tsv", b"", [], "empty edge list"),
    ("blank-lines", "g.tsv", b"\n\n  \n", [], "empty edge list"),
    ("only-comments", "g.tsv", b"# SNAP graph\n# Nodes: 3\n", [], "empty edge list"),
    ("header-only", "g.tsv", b"src\tdst\n", [], "no edges"),
    ("header-only-bom", "g.tsv", b"\xef\xbb\xbfsource,target\r\n", [], "no edges"),
    ("one-field", "g.tsv", b"1\n2\n", [], "g.tsv:1"),
    ("id-not-integer", "g.tsv", b"1\t2\n3\tx7\n", ["--ids", "int"], "g.tsv:2"),
    ("id-beyond-int64", "g.tsv", b"1\t2\n2\t99999999999999999999999\n", [], "64-bit"),
    ("id-float", "g.tsv", b"1\t2\n2\t3.5\n", ["--ids", "int"], "g.tsv:2"),
    ("weight-not-number", "g.tsv", b"1\t2\t0.5\n2\t3\theavy\n", ["--weight-col", "2"], "g.tsv:2"),
    ("rel-empty", "g.tsv", b"1,r,2\n2,,3\n", ["--rel-col", "1", "--dst-col", "2"], "g.tsv:2"),
    ("column-missing", "g.tsv", b"1\t2\n2\t3\n", ["--dst-col", "5"], "g.tsv:1"),
    ("input-missing", None, None, ["{dir}/nothing.tsv"], "nothing.tsv"),
    ("input-directory", None, None, ["{dir}"], "is a directory"),
    ("input-binary", "g.bin", bytes(range(256)) * 8, [], "g.bin"),
    ("out-exists", "g.tsv", b"1\t2\n", ["--out", "{dir}"], "exists"),
    ("out-under-file", "g.tsv", b"1\t2\n", ["--out", "{dir}/g.tsv/ds"], "cannot create the output"),
    ("fractions-too-large", "g.tsv", b"1\t2\n", ["--valid-frac", "0.6", "--test-frac", "0.6"], "--valid-frac"),
    ("fraction-negative", "g.tsv", b"1\t2\n", ["--test-frac", "-0.1"], "--test-frac"),
    ("no-train-edges", "g.tsv", b"1\t2\n", ["--test-frac", "0.99"], "train split"),
    ("all-self-loops-dropped", "g.tsv", b"1\t1\n2\t2\n", ["--self-loops", "drop"], "self-loop"),
    ("bad-on-error", "g.tsv", b"1\t2\n", ["--on-error", "ignore"], "--on-error"),
    ("bad-delimiter-col", "g.tsv", b"1;2\n", ["--delimiter", ","], "g.tsv:1"),
    ("partitions-zero", "g.tsv", b"1\t2\n2\t3\n", ["--partitions", "0"], "partitions"),
]


@pytest.mark.parametrize("case", PREP_CASES, ids=[c[0] for c in PREP_CASES])
def test_prep_edges(tmp_path, case):
    _, name, data, extra, expect = case
    src = tmp_path / "in"
    src.mkdir()
    args = [a.replace("{dir}", str(src)) for a in extra]
    if name is not None:
        (src / name).write_bytes(data)
        args = [str(src / name)] + args
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    before = tree_hash(src)
    out = subprocess.run(PREP + ["edges"] + args, capture_output=True, text=True, timeout=120)
    assert_one_line_error(out, "sluice-prep", expect)
    assert not (tmp_path / "out").exists() and not temporaries(tmp_path)
    assert tree_hash(src) == before


KG_CASES = [
    ("kg-missing-dir", None, "nothing"),
    ("kg-no-train", {"valid.txt": b"a\tr\tb\n", "test.txt": b"a\tr\tb\n"}, "train.txt"),
    ("kg-two-fields", {"train.txt": b"a\tr\n", "valid.txt": b"a\tr\tb\n", "test.txt": b"a\tr\tb\n"}, "train.txt:1"),
    ("kg-not-utf8", {"train.txt": b"a\tr\t\xff\n", "valid.txt": b"a\tr\tb\n", "test.txt": b"a\tr\tb\n"},
     "train.txt:1: not UTF-8"),
    ("kg-truncated-gzip", {"train.txt.gz": _gz(_triples_text())[:30000], "valid.txt": b"a\tr\tb\n",
                           "test.txt": b"a\tr\tb\n"}, "truncated"),
    ("kg-unknown-entity-dict", {"train.txt": b"a\tr\tb\n", "valid.txt": b"a\tr\tb\n", "test.txt": b"a\tr\tzz\n",
                                "entities.dict": b"0\ta\n1\tb\n", "relations.dict": b"0\tr\n"}, "zz"),
]


@pytest.mark.parametrize("case", KG_CASES, ids=[c[0] for c in KG_CASES])
def test_prep_kg(tmp_path, case):
    _, files, expect = case
    src = tmp_path / ("nothing" if files is None else "kg")
    if files is not None:
        src.mkdir()
        for n, data in files.items():
            (src / n).write_bytes(data)
    out = subprocess.run(PREP + ["kg", str(src), "--out", str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=120)
    assert_one_line_error(out, "sluice-prep", expect)
    assert not (tmp_path / "out").exists() and not temporaries(tmp_path)


def test_prep_leaves_no_temporary_of_a_killed_run(tmp_path):
    """A writer killed with SIGKILL leaves `<out>.tmp-<pid>`; the next run removes it."""
    stale = tmp_path / "out.tmp-999999"
    stale.mkdir()
    (stale / "half.bin").write_bytes(b"x" * 10)
    (tmp_path / "g.tsv").write_text("1\t2\n2\t3\n")
    out = subprocess.run(PREP + ["edges", str(tmp_path / "g.tsv"), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert not stale.exists() and (tmp_path / "out/manifest.json").exists()


def test_prep_reads_snap_comments_bom_and_self_loops(tmp_path):
    """What used to be silently wrong: a byte-order mark ate the first edge, comment lines became
    nodes, self-loops were neither counted nor droppable."""
    text = "\ufeff# Directed graph\n# FromNodeId\tToNodeId\n1\t2\n2\t3\n3\t3\n"
    (tmp_path / "g.tsv").write_text(text, encoding="utf-8")
    for loops, edges in (("keep", 3), ("drop", 2)):
        out = subprocess.run(PREP + ["edges", str(tmp_path / "g.tsv"), "--out", str(tmp_path / loops),
                                     "--self-loops", loops], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        m = json.loads((tmp_path / loops / "manifest.json").read_text())
        assert m["counts"]["nodes"] == 3 and m["counts"]["edges"]["train"] == edges
        assert m["stats"]["comment_lines"] == 2 and m["stats"]["self_loops"] == 1


# ---------------------------------------------------------------------------------------------
# Run directories: (id, setup(run_dir, config) -> the command's extra arguments, expected).

def _read_only(run_dir: pathlib.Path) -> list[str]:
    run_dir.mkdir()
    run_dir.chmod(0o555)
    return []


_HELD = []


def _lock_held(run_dir: pathlib.Path) -> list[str]:
    """Another trainer's lock on the run directory: this test process takes its flock."""
    import fcntl
    run_dir.mkdir()
    f = open(run_dir / "lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(f)  # held until the module's tests end
    return []


RUNDIR_CASES = [
    ("run-dir-is-file", lambda r: (r.write_text("not a folder"), [])[1], "run"),
    ("run-dir-parent-is-file", "PARENT", "run"),
    ("run-dir-has-run", "TRAINED", "--resume"),
    ("lock-held", _lock_held, "lock"),
    ("resume-other-config", "RESUME_OTHER", "model.dim 12 (the run's: 8)"),
]


@pytest.mark.parametrize("case", RUNDIR_CASES, ids=[c[0] for c in RUNDIR_CASES])
def test_run_dir(sluice_bin, lp_ds, trained, tmp_path, case):
    _, setup, expect = case
    run_dir, extra, sets = tmp_path / "run", [], []
    if setup == "PARENT":
        (tmp_path / "f").write_text("x")
        run_dir = tmp_path / "f" / "run"
    elif setup in ("TRAINED", "RESUME_OTHER"):
        shutil.copytree(trained, run_dir)
        if setup == "RESUME_OTHER":
            extra, sets = ["--resume"], ["--set", "model.dim=12"]
    else:
        extra = setup(run_dir)
    before = tree_hash(run_dir)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(lp_config(lp_ds, run_dir))
    out = run(sluice_bin, "train", str(cfg), *extra, *sets)
    assert_one_line_error(out, "sluice", expect)
    assert tree_hash(run_dir) == before


# More run directories: (id, setup(run_dir, trained, dataset) -> (run_dir, arguments, env),
# expected). A full disk comes from SLUICE_FAULT (storage/fault_injection.h).
def _trained_with(change):
    def setup(run_dir, trained, ds):
        shutil.copytree(trained, run_dir)
        change(run_dir)
        return run_dir, ["--resume"], {}
    return setup


def _replace_with_dir(path: pathlib.Path) -> None:
    path.unlink()
    path.mkdir()


def _stray_checkpoint(run_dir: pathlib.Path) -> None:
    latest = (run_dir / "checkpoints/latest").read_text().strip()
    stray = run_dir / "checkpoints/epoch-7-step-0"
    shutil.copytree(run_dir / "checkpoints" / latest, stray)
    (stray / "state.json").unlink()
    for f in ("latest", "best"):
        (run_dir / "checkpoints" / f).unlink(missing_ok=True)
    for d in (run_dir / "checkpoints").glob("epoch-*"):
        if d != stray:
            shutil.rmtree(d)


MORE_RUNDIR_CASES = [
    ("full-disk-at-start", lambda r, t, ds: (r, [], {"SLUICE_FAULT": f"write:enospc:{r}/:0:all"}), "No space left"),
    ("run-dir-is-dataset", lambda r, t, ds: (ds, [], {}), "is inside the dataset"),
    ("run-dir-inside-dataset", lambda r, t, ds: (ds / "runs/a", [], {}), "is inside the dataset"),
    ("checkpoints-is-file", _trained_with(lambda r: (shutil.rmtree(r / "checkpoints"),
                                                     (r / "checkpoints").write_text("x"))), "checkpoints"),
    ("config-yaml-is-dir", _trained_with(lambda r: _replace_with_dir(r / "config.yaml")), "config.yaml"),
    ("lock-is-dir", _trained_with(lambda r: _replace_with_dir(r / "lock")), "lock"),
    ("stray-checkpoint", _trained_with(_stray_checkpoint), "epoch-7-step-0"),
]


@pytest.mark.parametrize("case", MORE_RUNDIR_CASES, ids=[c[0] for c in MORE_RUNDIR_CASES])
def test_run_dir_more(sluice_bin, trained, tmp_path, case):
    _, setup, expect = case
    ds = tmp_path / "ds"
    shutil.copytree(_dataset_of(trained), ds)
    run_dir, extra, env = setup(tmp_path / "run", trained, ds)
    before, data_before = tree_hash(run_dir), tree_hash(ds)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(lp_config(ds, run_dir))
    out = subprocess.run([str(sluice_bin), "train", str(cfg), *extra], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env})
    assert_one_line_error(out, "sluice", expect)
    assert tree_hash(run_dir) == before and tree_hash(ds) == data_before
    assert not temporaries(tmp_path / "run")


def _dataset_of(run_dir: pathlib.Path) -> pathlib.Path:
    """The dataset a trained run was trained on (its config.yaml names it)."""
    for line in (run_dir / "config.yaml").read_text().splitlines():
        if line.startswith("dataset:"):
            return pathlib.Path(line.split(":", 1)[1].strip().strip('"'))
    raise AssertionError("no dataset in config.yaml")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_run_dir(sluice_bin, lp_ds, tmp_path):
    _read_only(tmp_path / "run")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(lp_config(lp_ds, tmp_path / "run"))
    assert_one_line_error(run(sluice_bin, "train", str(cfg)), "sluice", "run")


# ---------------------------------------------------------------------------------------------
# Checkpoints: each case damages a copy of the trained run; --resume, eval and export must say
# which checkpoint and file, and change nothing.

def _latest(run_dir: pathlib.Path) -> pathlib.Path:
    return run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()


def _ckpt_file(run_dir, name):
    return _latest(run_dir) / name


CHECKPOINT_CASES = [
    ("state-truncated", lambda r: _ckpt_file(r, "state.json").write_text('{"epoch": 1'), "state.json"),
    ("state-empty", lambda r: _ckpt_file(r, "state.json").write_text(""), "state.json"),
    ("state-missing", lambda r: _ckpt_file(r, "state.json").unlink(), "epoch-1-step-0"),
    ("table-truncated", lambda r: _ckpt_file(r, "nodes.bin").write_bytes(_ckpt_file(r, "nodes.bin").read_bytes()[:100]),
     "nodes.bin"),
    ("table-bit-flip", lambda r: _flip_file(_ckpt_file(r, "nodes.bin")), "nodes.bin"),
    ("table-missing", lambda r: _ckpt_file(r, "nodes.bin").unlink(), "nodes.bin"),
    ("relations-bit-flip", lambda r: _flip_file(_ckpt_file(r, "relations.pt")), "relations.pt"),
    ("relations-missing", lambda r: _ckpt_file(r, "relations.pt").unlink(), "relations.pt"),
    ("state-not-object", lambda r: _ckpt_file(r, "state.json").write_text("[1]"), "state.json"),
    ("best-dangling", lambda r: (r / "checkpoints/best").write_text("epoch-8-step-0\n"), "epoch-8-step-0"),
]


def _flip_file(p: pathlib.Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x01
    p.write_bytes(bytes(b))


@pytest.mark.parametrize("command", ["resume", "eval", "export"])
@pytest.mark.parametrize("case", CHECKPOINT_CASES, ids=[c[0] for c in CHECKPOINT_CASES])
def test_checkpoint(sluice_bin, lp_ds, trained, tmp_path, case, command):
    name, damage, expect = case
    if name == "best-dangling" and command == "resume":
        pytest.skip("resume reads `latest`, not `best`")
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    damage(run_dir)
    before = tree_hash(run_dir)
    if command == "resume":
        cfg = tmp_path / "c.yaml"
        cfg.write_text(lp_config(lp_ds, run_dir))
        out = run(sluice_bin, "train", str(cfg), "--resume", "--set", "train.epochs=2")
    elif command == "eval":
        out = run(sluice_bin, "eval", str(run_dir), "--checkpoint", "best" if name == "best-dangling" else "latest")
    else:
        out = run(sluice_bin, "export", str(run_dir), "--out", str(tmp_path / "exported"),
                  "--checkpoint", "best" if name == "best-dangling" else "latest")
    assert_one_line_error(out, "sluice", expect)
    assert tree_hash(run_dir) == before and not (tmp_path / "exported").exists()
    assert not temporaries(run_dir, tmp_path)


# ---------------------------------------------------------------------------------------------
# Recommendation: a few of the same checks on a click log.

REC_CASES = [
    ("rec-no-train", lambda d, m: m["counts"]["samples"].update(train=0), "train samples"),
    ("rec-record-bytes", lambda d, m: m["record"].update(bytes=3), "record.bytes"),
    ("rec-samples-truncated", lambda d, m: _truncate(d, m, "samples.train", -5), "samples"),
    ("rec-dense-disagrees", lambda d, m: m["record"].update(dense=m["record"]["dense"] + 2), "record.bytes"),
    ("rec-samples-missing", lambda d, m: (d / m["files"]["samples.train"]["path"]).unlink(), "samples"),
]


@pytest.mark.parametrize("case", REC_CASES, ids=[c[0] for c in REC_CASES])
def test_recommendation_dataset(sluice_bin, clicks, tmp_path, case):
    _, mutate, expect = case
    d = damaged_copy(clicks, tmp_path / "ds", mutate)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"task: recommendation\ndataset: {d}\nrun_dir: {tmp_path / 'run'}\nprogress: false\n"
                   "model: {dim: 4, bottom: [8], top: [8], ids: modulo, table_rows: 1000}\n"
                   "train: {epochs: 1, batch: 256}\n")
    assert_one_line_error(run(sluice_bin, "train", str(cfg)), "sluice", expect)


def test_corpus_size():
    """The issue's floor: at least 150 cases."""
    n = (len(CONFIG_CASES) + len(NUMERIC_CASES) + len(CLI_CASES) + len(DATASET_CASES) + 1 + len(PREP_CASES)
         + len(KG_CASES) + 2 + len(RUNDIR_CASES) + len(MORE_RUNDIR_CASES) + 1 + 3 * len(CHECKPOINT_CASES) - 1
         + len(REC_CASES) + len(NC_DATASET_CASES) + 2)
    assert n >= 150, n
