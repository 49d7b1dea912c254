"""End-to-end node classification through the sluice CLI: GraphSage and GAT trained out of core
(feature rows through a cache of 20% of the rows) equal the same schedule with every feature in
RAM, bit for bit, at 1 and 2 threads; float16 features; GCN on Cora with every neighbour sampled
equals full-graph GCN computed densely; Cora reaches its published accuracy range; bad input is
one clear line and a non-zero exit."""
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run

PREP = [sys.executable if "numpy" in sys.modules else "/usr/bin/python3", str(ROOT / "scripts/sluice_prep.py")]
DATASETS = pathlib.Path(os.environ.get("SLUICE_DATASETS", ROOT.parent / "shared/datasets"))


def prep(*args) -> None:
    out = subprocess.run(PREP + [str(a) for a in args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> pathlib.Path:
    """About 20,000 nodes, 200,000 edges and 64 features (the issue's exactness graph)."""
    d = tmp_path_factory.mktemp("nc")
    prep("gen-nc", "--nodes", 20000, "--edges", 200000, "--features", 64, "--seed", 5,
         "--partitions", 1, "--out", d / "ds")
    return d / "ds"


@pytest.fixture(scope="module")
def cora(tmp_path_factory) -> pathlib.Path:
    src = DATASETS / "cora"
    if not (src / "ind.cora.x").exists():
        pytest.skip(f"Cora not found at {src} (set SLUICE_DATASETS)")
    d = tmp_path_factory.mktemp("cora")
    prep("planetoid", src, "--dataset", "cora", "--partitions", 1, "--out", d / "cora")
    return d / "cora"


def write_config(path: pathlib.Path, dataset: pathlib.Path, run_dir: pathlib.Path, model: str,
                 storage: str, epochs: int = 2, extra: str = "") -> pathlib.Path:
    path.write_text("\n".join([
        "task: node_classification", f"dataset: {dataset}", f"run_dir: {run_dir}", "progress: false",
        f"model: {model}", f"train: {{epochs: {epochs}, batch: 32, lr: 0.01, seed: 3}}",
        "eval: {every: 1, fanouts: [5, 5], batch: 32}", f"storage: {storage}", extra]) + "\n")
    return path


SAGE = "{kind: graphsage, layers: 2, hidden: 32, fanouts: [5, 5], dropout: 0.5}"
GAT = "{kind: gat, layers: 2, hidden: 8, heads: 4, fanouts: [5, 5], dropout: 0.5, attention_dropout: 0.3}"
# Learnable node embeddings instead of the features: rows trained by Adagrad, written back.
EMB = "{kind: graphsage, layers: 2, hidden: 32, fanouts: [5, 5], dropout: 0.5, embedding_dim: 16}"
# 4,000 rows of 20,000: the cache holds 20% of the features; a step takes about 700 rows.
OOC = "{mode: out_of_core, cache_rows: 4000, window: 1, run_ahead: 1}"
MEM = "{mode: in_memory}"


def train(sluice_bin, config: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    out = run(sluice_bin, "train", str(config), *extra)
    assert out.returncode == 0, out.stderr
    return out


def checkpoint_file(run_dir: pathlib.Path, name: str) -> bytes:
    latest = (run_dir / "checkpoints/latest").read_text().strip()
    return (run_dir / "checkpoints" / latest / name).read_bytes()


def dense(run_dir: pathlib.Path) -> bytes:
    return checkpoint_file(run_dir, "dense.pt")


# Every planner, steps' io in groups (one sorted sweep per group, rows 64 KiB apart read
# together), and features read through mmap: the same model as in memory, bit for bit.
PLANNERS = {
    "oracle_grouped": "{mode: out_of_core, cache_rows: 9000, window: 2, io_group: 3, io_group_gap: 65536}",
    "lru_grouped": "{mode: out_of_core, cache_rows: 9000, planner: lru, io_group: 2}",
    "static": "{mode: out_of_core, cache_rows: 6000, planner: static, run_ahead: 1}",
    "none": "{mode: out_of_core, cache_rows: 6000, planner: none, run_ahead: 1}",
    "static_spill": "{mode: out_of_core, cache_rows: 6000, planner: static, run_ahead: 1, spill_steps: 4}",
    "oracle_spill": "{mode: out_of_core, cache_rows: 9000, window: 2, spill_steps: 1}",
    "mmap_random": "{mode: in_memory, mmap: random}",
    "mmap_normal": "{mode: in_memory, mmap: normal}",
}


@pytest.mark.parametrize("storage", list(PLANNERS), ids=list(PLANNERS))
def test_every_planner_and_mmap_equal_in_memory_bitwise(sluice_bin, gen, tmp_path, storage):
    for name, st in (("x", PLANNERS[storage]), ("mem", MEM)):
        train(sluice_bin, write_config(tmp_path / f"{name}.yaml", gen, tmp_path / name, SAGE, st, epochs=1))
    assert dense(tmp_path / "x") == dense(tmp_path / "mem")
    summary = json.loads((tmp_path / "x/summary.json").read_text())
    if storage.startswith("mmap"):
        assert summary["memory"]["mode"] == "in_memory"
        return
    assert summary["cache"]["rows_loaded"] > 20000, summary["cache"]
    assert summary["io"]["requests"] > 0 and summary["io"]["bytes"] >= summary["cache"]["rows_read"] * 256
    if storage == "none":  # read-through: a cache only as large as the steps in flight
        assert summary["cache"]["capacity_rows"] < 6000, summary["cache"]


def test_static_planner_makes_room_for_larger_evaluation_steps(sluice_bin, gen, tmp_path):
    """The static planner pins the hottest rows, leaving room for training's steps only (1.4k of
    3,000 rows pinned); evaluation's steps are four times larger (batch 128). The evaluation pass
    evicts pinned rows instead of failing with a full cache: the same validation as the oracle,
    and training's next epoch pins them again (the same model)."""
    metrics = {}
    for planner in ("static", "oracle"):
        st = f"{{mode: out_of_core, cache_rows: 3000, planner: {planner}, run_ahead: 1}}"
        cfg = write_config(tmp_path / f"{planner}.yaml", gen, tmp_path / planner, EMB, st, epochs=2)
        cfg.write_text(cfg.read_text().replace("batch: 32}", "batch: 128}"))  # eval's batch
        out = train(sluice_bin, cfg)
        if planner == "static":
            assert "planner static, 1.4k pinned" in out.stdout, out.stdout
        metrics[planner] = [json.loads(l)["valid"] for l in (tmp_path / planner / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics["static"]) == 2 and metrics["static"] == metrics["oracle"]
    assert dense(tmp_path / "static") == dense(tmp_path / "oracle")


def test_spill_serves_loads_from_packs(sluice_bin, gen, tmp_path):
    """With storage.spill_steps the loads of training come from the steps' packs (the pinned rows
    never spilled; nor the rows the steps in flight keep resident), and the spill file is gone
    once the run ends; each epoch after the first starts with the packs the epoch before filled
    for it (one sweep of the whole file in the run, validation between the epochs), the same
    model as in memory bit for bit; more than io groups of one step allow is refused in one
    line."""
    cfg = write_config(tmp_path / "s.yaml", gen, tmp_path / "s", SAGE, PLANNERS["static_spill"], epochs=3)
    out = train(sluice_bin, cfg)
    train(sluice_bin, write_config(tmp_path / "mem.yaml", gen, tmp_path / "mem", SAGE, MEM, epochs=3))
    assert dense(tmp_path / "s") == dense(tmp_path / "mem")
    spill = json.loads((tmp_path / "s/summary.json").read_text())["spill"]
    assert spill["horizon_steps"] == 4 and spill["packs_dropped"] == 0, spill
    assert spill["full_sweeps"] == 1 and spill["passes_continued"] == 2, spill
    # Only the pinned rows' first loads read the dataset.
    summary = json.loads((tmp_path / "s/summary.json").read_text())
    assert spill["rows_served"] > 20000 and spill["rows_direct"] < summary["cache"]["capacity_rows"], spill
    assert spill["bytes_written"] >= spill["rows_packed"] * 256 > 0, spill
    # A step's pack leaves out the rows of the run-ahead's previous step, which the cache holds.
    assert spill["resident_steps"] == 1 and spill["rows_resident"] > 0, spill
    assert "spill: every 4 steps" in out.stdout + out.stderr
    assert not (tmp_path / "s/features.spill").exists()
    bad = write_config(tmp_path / "b.yaml", gen, tmp_path / "b", SAGE,
                       "{mode: out_of_core, io_group: 2, spill_steps: 4}")
    out = run(sluice_bin, "train", str(bad))
    assert out.returncode != 0 and "storage.io_group: 1" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_full_disk_under_the_spills_writes_fails_in_one_line(sluice_bin, gen, tmp_path):
    """The spill's packs are written by a thread of their own: a write that fails there (the
    disk full at the fifth chunk on) stops the run with one line naming the spill file, at once,
    not a hang and not a model trained on rows that were never written."""
    cfg = write_config(tmp_path / "s.yaml", gen, tmp_path / "s", SAGE, PLANNERS["static_spill"], epochs=1)
    env = {**os.environ, "SLUICE_FAULT": f"write:enospc:{tmp_path / 's'}/features.spill:4:all"}
    out = subprocess.run([str(sluice_bin), "train", str(cfg)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode != 0, out.stdout
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "feature spill file" in err[0] and "No space left" in err[0], out.stderr


def test_grouped_io_reads_fewer_larger_requests(sluice_bin, gen, tmp_path):
    """A group's loads in one sorted pass with a gap: far fewer requests than per-step reads."""
    stats = {}
    for name, st in (("step", "{mode: out_of_core, cache_rows: 9000, window: 2, io_group: 1}"),
                     ("group", PLANNERS["oracle_grouped"])):
        train(sluice_bin, write_config(tmp_path / f"{name}.yaml", gen, tmp_path / name, SAGE, st, epochs=1))
        stats[name] = json.loads((tmp_path / name / "summary.json").read_text())["io"]
    assert stats["group"]["requests"] * 3 < stats["step"]["requests"], stats


def test_evaluation_steps_larger_than_trainings_run_with_less_run_ahead(sluice_bin, gen, tmp_path):
    """Evaluation batches of 512 sample about 8,500 rows, twelve times a training step: in a
    9,000-row cache planned for training (window 1, run-ahead 1) they once failed ("more than the
    3000 feature rows a step may take"); now they run one at a time and score as in memory."""
    lines = {}
    for name, st in (("x", "{mode: out_of_core, cache_rows: 9000, window: 1, run_ahead: 1}"), ("mem", MEM)):
        cfg = write_config(tmp_path / f"{name}.yaml", gen, tmp_path / name, SAGE, st, epochs=1)
        cfg.write_text(cfg.read_text().replace("eval: {every: 1, fanouts: [5, 5], batch: 32}",
                                               "eval: {every: 1, fanouts: [5, 5], batch: 512}"))
        out = train(sluice_bin, cfg)
        ev = run(sluice_bin, "eval", str(tmp_path / name), "--split", "test")
        assert ev.returncode == 0, ev.stderr
        lines[name] = ([x.split("s/s, ", 1)[-1] for x in out.stderr.splitlines() + out.stdout.splitlines()
                        if "valid accuracy" in x], ev.stdout.strip().splitlines()[-1])
    assert lines["x"][0] and lines["x"] == lines["mem"], lines


# Caches below the rows of the steps in flight (a step samples about 700 rows; run-ahead 2 or 3
# keeps 3 or 4 steps' rows resident) but above two steps' (compute may hold step t while it reads
# step t + 1 when the run-ahead covers a group; with groups of 3 and run-ahead 2 it does not).
DRAINED = {
    "oracle": (SAGE, "{mode: out_of_core, cache_rows: 1600, window: 1, run_ahead: 3}"),
    "lru_grouped": (SAGE, "{mode: out_of_core, cache_rows: 1600, planner: lru, run_ahead: 2, io_group: 3}"),
    "static_spill": (SAGE, "{mode: out_of_core, cache_rows: 1700, planner: static, run_ahead: 3, spill_steps: 4}"),
    "embeddings": (EMB, "{mode: out_of_core, cache_rows: 1600, window: 2, run_ahead: 3}"),
}


@pytest.mark.parametrize("name", list(DRAINED), ids=list(DRAINED))
def test_a_cache_below_the_steps_in_flight_drains_and_trains_the_in_memory_model(sluice_bin, gen, tmp_path, name):
    """A step that does not fit beside the steps in flight (larger than the memory plan's probe
    saw, or a cache set below them) waits until compute has finished them and takes their slots:
    the run goes on, once warned, and trains the in-memory model bit for bit (learnable rows
    written back included); the summary counts such steps. A cache below two steps is refused."""
    model, storage = DRAINED[name]
    out = train(sluice_bin, write_config(tmp_path / "x.yaml", gen, tmp_path / "x", model, storage, epochs=2))
    train(sluice_bin, write_config(tmp_path / "mem.yaml", gen, tmp_path / "mem", model, MEM, epochs=2))
    assert dense(tmp_path / "x") == dense(tmp_path / "mem")
    if model == EMB:
        assert checkpoint_file(tmp_path / "x", "nodes.bin") == checkpoint_file(tmp_path / "mem", "nodes.bin")
    cache = json.loads((tmp_path / "x/summary.json").read_text())["cache"]
    assert 0 < cache["drained_steps"] < cache["steps"], cache
    assert out.stderr.count("did not fit beside the") == 1, out.stderr
    assert "rows of the steps in flight: a step that does not fit beside them waits for them" in out.stdout
    assert f"{cache['drained_steps']} steps did not fit the row cache" in out.stdout
    if name == "oracle":
        small = write_config(tmp_path / "s.yaml", gen, tmp_path / "s", model, storage.replace("1600", "1000"))
        bad = run(sluice_bin, "train", str(small))
        assert bad.returncode != 0 and "storage.cache_rows 1000 cannot hold two steps'" in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_mmap_needs_in_memory_features(sluice_bin, gen, tmp_path):
    cfg = write_config(tmp_path / "m.yaml", gen, tmp_path / "m", SAGE, "{mode: out_of_core, mmap: normal}")
    out = run(sluice_bin, "train", str(cfg))
    assert out.returncode != 0
    assert "storage.mmap" in out.stderr and "in_memory" in out.stderr and out.stderr.count("\n") == 1


def test_step_log_has_a_line_per_step(sluice_bin, gen, tmp_path):
    cfg = write_config(tmp_path / "s.yaml", gen, tmp_path / "s", SAGE, OOC, epochs=2, extra="step_log: true")
    train(sluice_bin, cfg)
    lines = (tmp_path / "s/steps.tsv").read_text().splitlines()
    assert lines[0] == "epoch\tstep\tseconds\tunits\tloss"
    rows = [line.split("\t") for line in lines[1:]]
    train_nodes = int(json.loads((gen / "manifest.json").read_text())["stats"]["split_sizes"]["train"])
    per_epoch = (train_nodes + 31) // 32
    assert len(rows) == 2 * per_epoch
    assert [int(r[0]) for r in rows] == [1] * per_epoch + [2] * per_epoch
    assert all(float(r[2]) > 0 for r in rows) and sum(int(r[3]) for r in rows[:per_epoch]) == train_nodes


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model", [SAGE, GAT, EMB], ids=["graphsage", "gat", "embeddings"])
def test_out_of_core_equals_in_memory_bitwise(sluice_bin, gen, tmp_path, model, threads):
    runs = {}
    for name, storage in (("ooc", OOC), ("mem", MEM)):
        cfg = write_config(tmp_path / f"{name}.yaml", gen, tmp_path / name, model, storage)
        out = train(sluice_bin, cfg, "--set", f"threads.compute={threads}")
        runs[name] = out.stderr
    assert dense(tmp_path / "ooc") == dense(tmp_path / "mem")
    if model == EMB:  # the learned rows too, and they moved from their initial values
        ooc, mem = (checkpoint_file(tmp_path / n, "nodes.bin") for n in ("ooc", "mem"))
        assert ooc == mem
        first = (tmp_path / "ooc/checkpoints/epoch-1-step-0/nodes.bin").read_bytes()
        assert first != ooc
        summary = json.loads((tmp_path / "ooc/summary.json").read_text())
        assert summary["cache"]["rows_loaded"] > 1.5 * 20000, summary["cache"]
    summary = json.loads((tmp_path / "ooc/summary.json").read_text())
    # Rows were evicted and read again: far more loads than there are rows.
    assert summary["cache"]["rows_loaded"] > 1.5 * 20000, summary["cache"]
    assert summary["cache"]["capacity_rows"] == 4000
    # The same validation accuracy, epoch by epoch (metrics.jsonl).
    m = [[json.loads(l).get("valid") for l in (tmp_path / n / "metrics.jsonl").read_text().splitlines()]
         for n in ("ooc", "mem")]
    assert m[0] == m[1]


def test_float16_features_stay_float16_and_train_the_same_out_of_core(sluice_bin, tmp_path):
    prep("gen-nc", "--nodes", 3000, "--edges", 30000, "--features", 16, "--seed", 2,
         "--partitions", 1, "--feature-dtype", "float16", "--out", tmp_path / "ds")
    manifest = json.loads((tmp_path / "ds/manifest.json").read_text())
    assert manifest["files"]["nodes.features"]["dtype"] == "float16"
    ooc = "{mode: out_of_core, cache_rows: 2400, window: 1, run_ahead: 1}"
    err = {}
    for name, storage in (("ooc", ooc), ("mem", MEM)):
        cfg = write_config(tmp_path / f"{name}.yaml", tmp_path / "ds", tmp_path / name, SAGE, storage)
        out = train(sluice_bin, cfg)
        err[name] = out.stdout + out.stderr
    assert dense(tmp_path / "ooc") == dense(tmp_path / "mem")
    assert "16 features (float16)" in err["ooc"], err["ooc"]
    # Rows of 16 float16 values: 32 bytes each in the cache and in RAM.
    assert "feature rows of 32 bytes" in err["mem"], err["mem"]


@pytest.mark.parametrize("model", [GAT, EMB], ids=["gat", "embeddings"])
def test_kill_and_resume_equals_uninterrupted(sluice_bin, gen, tmp_path, model):
    cfg = write_config(tmp_path / "a.yaml", gen, tmp_path / "whole", model, OOC, epochs=2)
    train(sluice_bin, cfg)
    part = write_config(tmp_path / "b.yaml", gen, tmp_path / "cut", model, OOC, epochs=2)
    env = dict(os.environ, SLUICE_CRASH_AT="step:700")
    out = subprocess.run([str(sluice_bin), "train", str(part), "--set", "checkpoint_every=1"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode != 0
    out = run(sluice_bin, "train", str(part), "--resume")
    assert out.returncode == 0, out.stderr
    assert dense(tmp_path / "cut") == dense(tmp_path / "whole")
    if model == EMB:
        assert checkpoint_file(tmp_path / "cut", "nodes.bin") == checkpoint_file(tmp_path / "whole", "nodes.bin")


def test_gcn_with_every_neighbour_is_full_graph_gcn_on_cora(sluice_bin, cora, tmp_path):
    """Exported class probabilities of a GCN (fanouts -1) against D^-1/2 (A+I) D^-1/2 computed
    densely from the dataset's arrays and the checkpoint's weights."""
    torch = pytest.importorskip("torch", reason="python3-torch computes the dense reference")
    cfg = tmp_path / "gcn.yaml"
    shutil.copy(ROOT / "configs/cora_gcn.yaml", cfg)
    train(sluice_bin, cfg, "--set", f"dataset={cora}", "--set", f"run_dir={tmp_path / 'r'}",
          "--set", "train.epochs=20", "--set", "progress=false", "--set", "eval.every=0")
    out = run(sluice_bin, "export", str(tmp_path / "r"), "--out", str(tmp_path / "x"))
    assert out.returncode == 0, out.stderr
    prob = np.load(tmp_path / "x/probabilities.npy")
    m = json.loads((cora / "manifest.json").read_text())
    n, f = m["counts"]["nodes"], m["counts"]["feature_dim"]
    arr = lambda role, dt: np.fromfile(cora / m["files"][role]["path"], dtype=dt)
    x = arr("nodes.features", np.float32).reshape(n, f)
    x = x / np.where(x.sum(1, keepdims=True) == 0, 1, x.sum(1, keepdims=True))
    src, dst = arr("edges.train.src", np.int32), arr("edges.train.dst", np.int32)
    a = np.zeros((n, n), np.float64)
    a[dst, src] = 1  # row i: i's in-neighbours
    deg = a.sum(1) + 1
    a_hat = (a + np.eye(n)) / np.sqrt(deg[:, None] * deg[None, :])
    state = torch.jit.load(str(tmp_path / "r/checkpoints" / (tmp_path / "r/checkpoints/latest").read_text().strip() / "dense.pt"))
    p = {k: v.detach().double().numpy() for k, v in state.named_parameters()}
    h = np.maximum(a_hat @ (x @ p["self0.weight"].T) + p["bias0"], 0)
    logits = a_hat @ (h @ p["self1.weight"].T) + p["bias1"]
    ref = np.exp(logits - logits.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    assert np.abs(prob - ref).max() < 1e-5


def test_cora_gcn_reaches_the_published_range(sluice_bin, cora, tmp_path):
    out = train(sluice_bin, ROOT / "configs/cora_gcn.yaml", "--set", f"dataset={cora}",
                "--set", f"run_dir={tmp_path / 'r'}", "--set", "progress=false")
    out = run(sluice_bin, "eval", str(tmp_path / "r"), "--split", "test")
    assert out.returncode == 0, out.stderr
    acc = float(out.stdout.split("accuracy")[1].split()[0])
    assert acc >= 0.79, out.stdout
    out = run(sluice_bin, "predict", str(tmp_path / "r"), "--split", "test", "-k", "5")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "node\tpredicted\tp\tlabel" and len(lines) == 6
    for line in lines[1:]:
        node, predicted, p, label = line.split("\t")
        assert 0 <= int(predicted) < 7 and 0 < float(p) <= 1 and 0 <= int(label) < 7


def rewrite(ds: pathlib.Path, role: str, dtype, edit) -> None:
    m = json.loads((ds / "manifest.json").read_text())
    path = ds / m["files"][role]["path"]
    a = np.fromfile(path, dtype=dtype)
    edit(a)
    a.tofile(path)


@pytest.mark.parametrize("case,expect", [
    ("fanouts", "model.fanouts has 1 entries for model.layers 2"),
    ("label_range", "has label 99, outside [-1, 8)"),
    ("unlabelled_train", "is unlabelled (label -1)"),
    ("split_beyond", "nodes.test[0] is node 1000000, outside the graph's [0, 500)"),
    # The labels' recorded range against the new count, at open, before the labels are read.
    ("classes", "files.nodes.labels.range [0, 7] is outside [-1, 4) (counts.classes)"),
    ("nan_feature", "is nan"),
    ("no_by_dst", "no destination-sorted edges"),
    ("empty_split", "split (nodes.valid) is empty"),
    ("width", "rows are 8 wide but the manifest says feature_dim 9"),
    ("dtype", "is int32, expected float32 or float16"),
])
def test_bad_input_is_one_clear_line(sluice_bin, tmp_path, case, expect):
    prep("gen-nc", "--nodes", 500, "--edges", 3000, "--features", 8, "--seed", 1, "--partitions", 1,
         "--out", tmp_path / "ds")
    ds = tmp_path / "ds"
    m = json.loads((ds / "manifest.json").read_text())
    train_ids = np.fromfile(ds / m["files"]["nodes.train"]["path"], dtype=np.int64)
    extra = []
    if case == "fanouts":
        extra = ["--set", "model.fanouts=[5]"]
    elif case == "label_range":
        rewrite(ds, "nodes.labels", np.int32, lambda a: a.__setitem__(3, 99))
    elif case == "unlabelled_train":
        rewrite(ds, "nodes.labels", np.int32, lambda a: a.__setitem__(int(train_ids[0]), -1))
    elif case == "split_beyond":
        rewrite(ds, "nodes.test", np.int64, lambda a: a.__setitem__(0, 10**6))
    elif case == "classes":
        m["counts"]["classes"] = 4
        (ds / "manifest.json").write_text(json.dumps(m))
    elif case == "nan_feature":
        rewrite(ds, "nodes.features", np.float32, lambda a: a.__setitem__(int(train_ids[0]) * 8 + 2, np.nan))
    elif case == "width":
        m["counts"]["feature_dim"] = 9
        (ds / "manifest.json").write_text(json.dumps(m))
    elif case == "dtype":
        m["files"]["nodes.features"]["dtype"] = "int32"
        (ds / "manifest.json").write_text(json.dumps(m))
    elif case == "no_by_dst":
        m["files"] = {k: v for k, v in m["files"].items() if ".by_dst." not in k}
        (ds / "manifest.json").write_text(json.dumps(m))
    elif case == "empty_split":
        m["files"]["nodes.valid"]["shape"] = [0]
        m["files"]["nodes.valid"]["bytes"] = 0
        m["files"]["nodes.valid"].pop("crc32", None)
        (ds / m["files"]["nodes.valid"]["path"]).write_bytes(b"")
        (ds / "manifest.json").write_text(json.dumps(m))
    cfg = write_config(tmp_path / "c.yaml", ds, tmp_path / "r",
                       "{kind: graphsage, layers: 2, hidden: 8, fanouts: [-1, -1]}", MEM,
                       extra="eval: {every: 1, batch: 500}")
    cfg.write_text(cfg.read_text().replace("eval: {every: 1, fanouts: [5, 5], batch: 32}\n", ""))
    out = run(sluice_bin, "train", str(cfg), *extra)
    assert out.returncode != 0
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert lines[-1].startswith("sluice: error: "), out.stderr
    assert expect in lines[-1], out.stderr


def test_seeds_without_in_neighbours_get_valid_empty_blocks(sluice_bin, tmp_path):
    """Isolated nodes (gen-nc drops self-loops; a tiny graph leaves some with no in-edges) train
    and evaluate: their blocks are empty, GraphSage's mean is zero, GCN and GAT use the self-loop."""
    prep("gen-nc", "--nodes", 400, "--edges", 150, "--features", 8, "--seed", 4, "--partitions", 1,
         "--out", tmp_path / "ds")
    m = json.loads((tmp_path / "ds/manifest.json").read_text())
    dst = np.fromfile(tmp_path / "ds" / m["files"]["edges.train.dst"]["path"], dtype=np.int32)
    assert len(set(range(400)) - set(dst.tolist())) > 100  # many nodes have no in-neighbour
    for kind in ("graphsage", "gcn", "gat"):
        cfg = write_config(tmp_path / f"{kind}.yaml", tmp_path / "ds", tmp_path / kind,
                           f"{{kind: {kind}, layers: 2, hidden: 8, heads: 2, fanouts: [3, 3]}}", MEM)
        out = train(sluice_bin, cfg)
        assert "valid accuracy" in out.stdout + out.stderr


@pytest.mark.parametrize("storage", ["in_memory", "out_of_core"])
def test_layerwise_inference_equals_full_neighbourhood_evaluation_on_cora(sluice_bin, cora, tmp_path, storage):
    """Export's layer-wise inference (every node's layer-1 output, then layer 2; out of core the
    layer-1 outputs are a row file read through a cache of 1,500 rows) against the same model
    evaluated through blocks sampled with every neighbour: equal to 1e-6."""
    sets = ["--set", f"dataset={cora}", "--set", f"run_dir={tmp_path / 'r'}", "--set", "train.epochs=5",
            "--set", "progress=false", "--set", f"storage.mode={storage}", "--set", "eval.batch=16"]
    if storage == "out_of_core":
        sets += ["--set", "storage.cache_rows=1500", "--set", "storage.window=1", "--set", "storage.run_ahead=1"]
    train(sluice_bin, ROOT / "configs/cora_graphsage.yaml", *sets)
    out = run(sluice_bin, "export", str(tmp_path / "r"), "--out", str(tmp_path / "layerwise"))
    assert out.returncode == 0, out.stderr
    shutil.copytree(tmp_path / "r", tmp_path / "r2")
    cfg = (tmp_path / "r2/config.yaml").read_text()
    assert "layerwise: true" in cfg and "  batch: 16" in cfg
    # Blocks with every neighbour of 2 seeds fit the cache's share of a step.
    (tmp_path / "r2/config.yaml").write_text(cfg.replace("layerwise: true", "layerwise: false")
                                             .replace("  batch: 16", "  batch: 2"))
    out = run(sluice_bin, "export", str(tmp_path / "r2"), "--out", str(tmp_path / "blocks"))
    assert out.returncode == 0, out.stderr
    a = np.load(tmp_path / "layerwise/probabilities.npy")
    b = np.load(tmp_path / "blocks/probabilities.npy")
    assert a.shape == (2708, 7)
    assert np.abs(a - b).max() < 1e-6
    ids = np.load(tmp_path / "layerwise/node_ids.npy")
    assert sorted(ids.tolist()) == list(range(2708))
    assert not (tmp_path / "r/inference").exists()  # the layer files are removed afterwards
    # Inference of some nodes keeps only their rows of the last layer, each at its node's place:
    # the test split's nodes in the split's order, as export inferred them.
    out = run(sluice_bin, "predict", str(tmp_path / "r"), "--split", "test", "-k", "300")
    assert out.returncode == 0, out.stderr
    row_of = {int(v): i for i, v in enumerate(ids)}
    lines = out.stdout.strip().splitlines()[1:]
    assert len(lines) == 300
    for line in lines:
        node, predicted, prob, _ = line.split("\t")
        row = a[row_of[int(node)]]
        assert int(predicted) == int(row.argmax()) and abs(float(prob) - float(row.max())) < 1e-4, (line, row)


def test_export_writes_probabilities_as_it_infers_and_a_full_disk_leaves_nothing(sluice_bin, cora, tmp_path):
    """Export writes each node's probabilities into the .npy as its step computes (none held):
    rows that are distributions, the file numpy reads; a disk that fills while it writes fails
    in one line and leaves no export directory."""
    train(sluice_bin, ROOT / "configs/cora_graphsage.yaml", "--set", f"dataset={cora}", "--set",
          f"run_dir={tmp_path / 'r'}", "--set", "train.epochs=2", "--set", "progress=false")
    out = run(sluice_bin, "export", str(tmp_path / "r"), "--out", str(tmp_path / "x"))
    assert out.returncode == 0, out.stderr
    prob = np.load(tmp_path / "x/probabilities.npy")
    assert prob.shape == (2708, 7) and prob.dtype == np.float32
    assert np.abs(prob.sum(1) - 1).max() < 1e-5 and prob.min() >= 0
    env = dict(os.environ, SLUICE_FAULT="write:enospc:probabilities.npy:1:all")  # past the header
    out = subprocess.run([str(sluice_bin), "export", str(tmp_path / "r"), "--out", str(tmp_path / "y")],
                         capture_output=True, text=True, env=env)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "probabilities.npy" in lines[0] and "No space left" in lines[0], out.stderr
    assert not (tmp_path / "y").exists() and not (tmp_path / "y.tmp").exists()


def test_non_finite_features_are_refused_by_prep_and_found_by_verify(sluice_bin, tmp_path):
    import zlib
    feats = np.ones((50, 4), np.float32)
    feats[7, 2] = np.inf
    np.save(tmp_path / "f.npy", feats)
    np.save(tmp_path / "l.npy", np.arange(50) % 3)
    (tmp_path / "e.txt").write_text("".join(f"{i} {(i * 7) % 50}\n" for i in range(50)))
    out = subprocess.run(PREP + ["npy", "--edges", str(tmp_path / "e.txt"), "--features", str(tmp_path / "f.npy"),
                                 "--labels", str(tmp_path / "l.npy"), "--out", str(tmp_path / "ds")],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "node 7: feature 2 is inf (not finite" in out.stderr, out.stderr
    assert not (tmp_path / "ds").exists()
    # A dataset whose features went bad after preparation (checksum updated to match).
    prep("gen-nc", "--nodes", 300, "--edges", 2000, "--features", 8, "--seed", 1, "--partitions", 1,
         "--out", tmp_path / "g")
    rewrite(tmp_path / "g", "nodes.features", np.float32, lambda a: a.__setitem__(8 * 11 + 5, np.nan))
    m = json.loads((tmp_path / "g/manifest.json").read_text())
    f = m["files"]["nodes.features"]
    f["crc32"] = f"{zlib.crc32((tmp_path / 'g' / f['path']).read_bytes()):08x}"
    (tmp_path / "g/manifest.json").write_text(json.dumps(m))
    out = run(sluice_bin, "info", str(tmp_path / "g"), "--verify")
    assert out.returncode != 0
    assert "row 11, column 5 is not finite" in out.stderr, out.stderr


@pytest.mark.parametrize("model", [
    "{kind: graphsage, aggregator: max_pool, norm: batch, layers: 2, hidden: 16, fanouts: [4, 4]}",
    "{kind: gcn, norm: layer, layers: 3, hidden: 16, fanouts: [4, 3, 2], replace: true}",
    "{kind: gat, layers: 2, hidden: 4, heads: 2, output_heads: 2, fanouts: [4, 4], attention_dropout: 0.2}",
], ids=["maxpool-batchnorm", "gcn-layernorm-3layers-replace", "gat-2-output-heads"])
def test_options_train_and_stay_exact_out_of_core(sluice_bin, tmp_path, model):
    """Max-pool aggregation, batch and layer norm, three hops with replacement, AdamW, averaged
    output heads: they learn (validation accuracy beats chance by far) and out of core equals
    in memory bitwise."""
    prep("gen-nc", "--nodes", 3000, "--edges", 30000, "--features", 16, "--seed", 6,
         "--partitions", 1, "--out", tmp_path / "ds")
    ooc = "{mode: out_of_core, cache_rows: 2400, window: 1, run_ahead: 1}"
    acc = {}
    for name, storage in (("ooc", ooc), ("mem", MEM)):
        cfg = write_config(tmp_path / f"{name}.yaml", tmp_path / "ds", tmp_path / name, model, storage,
                           epochs=3, extra="eval: {every: 1, fanouts: [3, 3, 3], batch: 16}")
        text = cfg.read_text().replace("eval: {every: 1, fanouts: [5, 5], batch: 32}\n", "")
        text = text.replace("train: {epochs: 3,", "train: {optimizer: adamw, weight_decay: 0.01, epochs: 3,")
        if "layers: 3" not in model:
            text = text.replace("fanouts: [3, 3, 3]", "fanouts: [3, 3]")
        cfg.write_text(text)
        out = train(sluice_bin, cfg)
        acc[name] = [json.loads(l)["valid"]["accuracy"]
                     for l in (tmp_path / name / "metrics.jsonl").read_text().splitlines() if "valid" in l]
    assert dense(tmp_path / "ooc") == dense(tmp_path / "mem")
    assert acc["ooc"] == acc["mem"]
    assert acc["mem"][-1] > 0.5, acc  # 8 classes: chance is 0.125


def test_learning_rate_decay_reaches_embeddings_and_layers(sluice_bin, gen, tmp_path):
    """train.lr_decay with every validation after the first counted as a stall (the test hook):
    with only the layers learning (embedding_lr 0), then only the embeddings (lr 0), the decay
    changes what learns and leaves the other as it was."""
    env = dict(os.environ, SLUICE_TEST_STALL="1")
    for learning, frozen, rates in [("dense.pt", "nodes.bin", "train.embedding_lr=0"),
                                    ("nodes.bin", "dense.pt", "train.lr=0")]:
        runs = []
        for decay in (0.5, 1):
            run_dir = tmp_path / f"{learning}-{decay}"
            cfg = write_config(tmp_path / "c.yaml", gen, run_dir, EMB, MEM, epochs=3)
            out = subprocess.run([str(sluice_bin), "train", str(cfg), "--set", f"train.lr_decay={decay}", "--set",
                                  rates], capture_output=True, text=True, env=env, timeout=300)
            assert out.returncode == 0, out.stderr
            runs.append(run_dir)
        scales = [json.loads(x).get("lr_scale") for x in (runs[0] / "metrics.jsonl").read_text().splitlines()]
        assert scales == [None, 0.5, None], scales
        def model(run_dir: pathlib.Path, name: str) -> bytes:
            data = checkpoint_file(run_dir, name)
            if name == "dense.pt":
                return data
            # nodes.bin rows: 16 floats of embedding, then 16 of Adagrad state (which sums
            # gradients whatever the rate): the embeddings only.
            return np.frombuffer(data, np.float32).reshape(-1, 32)[:, :16].tobytes()
        assert model(runs[0], learning) != model(runs[1], learning), learning
        assert model(runs[0], frozen) == model(runs[1], frozen), frozen
