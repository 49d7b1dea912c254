"""End-to-end recommendation (DLRM) through the sluice CLI: out-of-core training through the row
cache (row file and RocksDB tables) equals the same schedule with every table in RAM, bit for
bit; resume after Ctrl-C or kill -9 equals an uninterrupted run; eval/export/predict; bad input."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run

PREP = [sys.executable if "numpy" in sys.modules else "/usr/bin/python3", str(ROOT / "scripts/sluice_prep.py")]


@pytest.fixture(scope="module")
def clicks(tmp_path_factory) -> pathlib.Path:
    """A Zipf click log with a planted model: 6 tables, 3 dense features."""
    d = tmp_path_factory.mktemp("rec")
    out = subprocess.run(PREP + ["gen-clicks", "--samples", "24000", "--sparse", "6", "--dense", "3",
                                 "--vocab", "6000", "--seed", "4", "--out", str(d / "ds")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return d / "ds"


def write_config(path: pathlib.Path, dataset: pathlib.Path, run_dir: pathlib.Path, ids: str = "modulo",
                 **storage) -> pathlib.Path:
    lines = ["task: recommendation", f"dataset: {dataset}", f"run_dir: {run_dir}", "progress: false",
             f"model: {{dim: 8, bottom: [16], top: [16], ids: {ids}, table_rows: 4096, linear: true}}",
             "train: {epochs: 2, batch: 200, optimizer: rowwise_adagrad, lr: 0.05, adagrad_init: 1.0e-4, seed: 3}",
             "eval: {every: 1}",
             "storage: {" + ", ".join(f"{k}: {v}" for k, v in storage.items()) + "}"]
    path.write_text("\n".join(lines) + "\n")
    return path


# A cache far smaller than the tables (6 x 4096 rows): rows are evicted and reloaded constantly.
OOC = {"mode": "out_of_core", "cache_rows": 5000, "window": 2, "run_ahead": 2, "planner": "oracle"}


def export(sluice_bin, run_dir: pathlib.Path, *args: str) -> dict[str, bytes]:
    out = run(sluice_bin, "export", str(run_dir), "--out", str(run_dir / "export"), *args)
    assert out.returncode == 0, out.stderr
    return {p.name: p.read_bytes() for p in sorted((run_dir / "export").glob("table_*.npy"))}


def dense_bytes(run_dir: pathlib.Path) -> bytes:
    latest = (run_dir / "checkpoints/latest").read_text().strip()
    return (run_dir / "checkpoints" / latest / "dense.pt").read_bytes()


def test_the_window_is_sized_at_start_up(sluice_bin, clicks, tmp_path):
    """storage.window 0 (the default): the window whose simulated loads are fewest among those
    whose ring fits the budget (a longer one must save 1%), said in the summary."""
    cfg = write_config(tmp_path / "c.yaml", clicks, tmp_path / "run", **dict(OOC, backend="rowfile", window=0))
    out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0", "--set", "train.epochs=1")
    assert out.returncode == 0, out.stderr
    look = json.loads((tmp_path / "run/summary.json").read_text())["lookahead"]
    loads = {int(w): v for w, v in look["window_simulated_loads"].items()}
    assert sorted(loads) == [2, 4, 8, 16, 32, 64], look
    best = None
    for w in sorted(loads):
        if best is None or loads[w] < 0.99 * loads[best]:
            best = w
    assert look["window"] == best and look["window_chosen"], look
    assert loads[2] > loads[64], f"a longer window saved no load: {loads}"
    assert re.search(rf"lookahead window {best} steps \(auto: the fewest simulated loads a step .*2: [\d,]+, "
                     r"4: .*64: [\d,]+\) \([\d.]+ s at start-up\)", out.stdout), out.stdout
    assert f"oracle window {best} steps" in out.stdout


def test_a_window_too_long_for_the_budget_is_shortened_and_said(sluice_bin, clicks, tmp_path):
    """An explicit storage.window whose ring of steps does not fit the budget beside the steps in
    flight is shortened to the longest that fits (the run does not fail), and the summary says
    so; the cache still holds the steps in flight."""
    storage = {k: v for k, v in OOC.items() if k != "cache_rows"}
    cfg = write_config(tmp_path / "c.yaml", clicks, tmp_path / "run",
                       **dict(storage, backend="rowfile", window=64, budget="200MiB"))
    out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0", "--set", "train.epochs=1")
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    window = summary["lookahead"]["window"]
    assert 0 < window < 64, summary["lookahead"]
    assert not summary["lookahead"]["window_chosen"]
    assert f"lookahead window {window} steps (storage.window 64 shortened" in out.stdout, out.stdout
    # The same run with room to spare keeps the window asked for, and says nothing of it.
    cfg = write_config(tmp_path / "d.yaml", clicks, tmp_path / "roomy",
                       **dict(storage, backend="rowfile", window=64, budget="1GiB"))
    out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0", "--set", "train.epochs=1")
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "roomy/summary.json").read_text())["lookahead"]["window"] == 64
    assert "shortened" not in out.stdout


def test_the_io_depth_is_probed_at_start_up(sluice_bin, clicks, tmp_path):
    """io.queue_depth 0 (the default): random reads of the run's row file at depths 4 up to what
    2% of the budget stages, the shallowest within 10% of the best rate kept and said; an
    explicit depth is used as given, without a probe."""
    storage = {k: v for k, v in OOC.items() if k != "cache_rows"}
    cfg = write_config(tmp_path / "c.yaml", clicks, tmp_path / "run", **dict(storage, backend="rowfile", budget="400MiB"))
    out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0", "--set", "train.epochs=1")
    assert out.returncode == 0, out.stderr
    io = json.loads((tmp_path / "run/summary.json").read_text())["io"]
    rates = {int(d): r for d, r in io["queue_depth_reads_per_s"].items()}
    assert sorted(rates) == [4, 8, 16, 32, 64], io  # 2% of 400 MiB in 128 KiB slots: 64
    best = max(rates.values())
    assert io["queue_depth_chosen"] and io["queue_depth"] == min(d for d, r in rates.items() if r >= 0.9 * best), io
    assert re.search(rf"io queue depth {io['queue_depth']} \(auto: the shallowest within 10% .*4: [\d]+k?, "
                     r".*64: [\d]+k?\) \([\d.]+ s at start-up\)", out.stdout), out.stdout
    out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0", "--set", "train.epochs=1",
              "--set", "io.queue_depth=8", "--set", f"run_dir={tmp_path / 'fixed'}")
    assert out.returncode == 0, out.stderr
    io = json.loads((tmp_path / "fixed/summary.json").read_text())["io"]
    assert io["queue_depth"] == 8 and not io["queue_depth_chosen"], io
    assert "io queue depth" not in out.stdout


def test_the_window_carries_over_epoch_boundaries(sluice_bin, clicks, tmp_path):
    """The oracle's window reaches into the next epoch's first steps: the rows those use stay
    cached through the epoch's end, so the next epoch starts with fewer loads than when the
    window ends with the epoch; the model is the same either way."""
    loads, tables, dense = {}, {}, {}
    for carry in ("true", "false"):
        run_dir = tmp_path / carry
        cfg = write_config(tmp_path / f"{carry}.yaml", clicks, run_dir,
                           **dict(OOC, backend="rowfile", window=16, carry_over=carry, carry_rows=0))
        out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0")
        assert out.returncode == 0, out.stderr
        loads[carry] = json.loads((run_dir / "summary.json").read_text())["cache"]["epoch_start_loads"]
        tables[carry], dense[carry] = export(sluice_bin, run_dir), dense_bytes(run_dir)
    assert loads["true"][0] == loads["false"][0], loads
    assert loads["true"][1] < loads["false"][1], loads
    assert tables["true"] == tables["false"] and dense["true"] == dense["false"]


CACHE_ROWS = 10000


def test_the_first_steps_rows_are_kept_for_the_next_epoch(sluice_bin, clicks, tmp_path):
    """storage.carry_rows: the rows of the epoch's first steps, as many steps as fit that share
    of the cache (at least 16), are evicted after every other row outside the window, so the
    next epoch (the same samples in the same order) finds them cached. Only the order of
    evictions changes: the model is the same bit for bit. (What it saves is measured by the
    row cache's test and bench/dlrm_bench.py: this log's 108-step epochs are too short for it.)"""
    cache, tables, dense, stdout = {}, {}, {}, {}
    for share in ("0.8", "0"):
        run_dir = tmp_path / share
        cfg = write_config(tmp_path / f"{share}.yaml", clicks, run_dir,
                           **dict(OOC, backend="rowfile", cache_rows=CACHE_ROWS, window=16, carry_rows=share))
        out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0")
        assert out.returncode == 0, out.stderr
        cache[share] = json.loads((run_dir / "summary.json").read_text())["cache"]
        tables[share], dense[share], stdout[share] = export(sluice_bin, run_dir), dense_bytes(run_dir), out.stdout
    kept, plain = cache["0.8"], cache["0"]
    # Whole steps while their distinct rows fit the share of the cache, at least 16 of them.
    assert 0 < kept["kept_rows"] <= CACHE_ROWS * 0.8 and kept["kept_steps"] >= 16, kept
    assert plain["kept_rows"] == 0 and plain["kept_steps"] == 0
    assert (f"first {kept['kept_steps']} steps for the next epoch (storage.carry_rows 0.8 of the cache)"
            in stdout["0.8"]), stdout["0.8"]
    assert kept["loads"] != plain["loads"], "the kept rows changed no eviction"
    assert tables["0.8"] == tables["0"] and dense["0.8"] == dense["0"]
    # One epoch: nothing to keep rows for. Half of a 5,000-row cache holds fewer than 16 steps'
    # rows, and keeping so few costs more loads than it saves.
    for name, sets in (("one", ["train.epochs=1", f"storage.cache_rows={CACHE_ROWS}", "storage.carry_rows=0.8"]),
                       ("small", ["storage.carry_rows=0.5"])):
        cfg = write_config(tmp_path / f"{name}.yaml", clicks, tmp_path / name, **dict(OOC, backend="rowfile"))
        out = run(sluice_bin, "train", str(cfg), "--set", "eval.every=0", *[a for s in sets for a in ("--set", s)])
        assert out.returncode == 0, out.stderr
        assert json.loads((tmp_path / name / "summary.json").read_text())["cache"]["kept_rows"] == 0, name


@pytest.mark.parametrize("threads", [1, 2])
def test_out_of_core_equals_in_memory_bitwise(sluice_bin, clicks, tmp_path, threads):
    tables, dense, stdout = {}, {}, {}
    # Row files with a small write-back buffer (swept often), with it and rows read ahead region
    # by region, and without either (rows straight to their pages).
    for name, storage in {"mem": {"mode": "in_memory"},
                          "rowfile": dict(OOC, backend="rowfile", write_back_rows=1500, preload_share=0),
                          "preload": dict(OOC, backend="rowfile", write_back_rows=1500, preload_share=0.25, preload_horizon=6),
                          "preload-direct": dict(OOC, backend="rowfile", write_back_share=0, preload_share=0.25, preload_horizon=6),
                          "direct": dict(OOC, backend="rowfile", write_back_share=0, preload_share=0),
                          "rocksdb": dict(OOC, backend="rocksdb"),
                          "lru": dict(OOC, backend="rowfile", planner="lru", write_back_rows=700),
                          "auto": dict(OOC, backend="rowfile", planner="auto", write_back_rows=700,
                                       preload_horizon=6),
                          "lru-preload": dict(OOC, backend="rowfile", planner="lru", write_back_rows=700,
                                              preload_share=0.25, preload_horizon=6)}.items():
        cfg = write_config(tmp_path / f"{name}.yaml", clicks, tmp_path / name, **storage)
        out = run(sluice_bin, "train", str(cfg), "--set", f"threads.total={threads}",
                  "--set", f"threads.compute={threads}")
        assert out.returncode == 0, out.stderr
        tables[name], dense[name], stdout[name] = export(sluice_bin, tmp_path / name), dense_bytes(tmp_path / name), out.stdout
    for name in ("rowfile", "preload", "preload-direct", "direct", "rocksdb", "lru", "lru-preload", "auto"):
        cache = [l for l in stdout[name].splitlines() if "cache:" in l][0]
        assert "write-backs 0" not in cache, f"{name}: no row was ever evicted: {cache}"
        assert tables[name] == tables["mem"], f"{name} differs from the in-memory run"
        assert dense[name] == dense["mem"]
    for name in ("preload", "preload-direct", "lru-preload"):
        taken = re.search(r"read-ahead: \d+ region passes read (\d+) rows .*; loads took (\d+)", stdout[name])
        assert taken and int(taken.group(2)) > 1000, f"{name}: loads took no rows read ahead: {stdout[name]}"
    passes = re.search(r"sweeps \((\d+) with a read-ahead pass\)", stdout["preload"])
    assert passes and int(passes.group(1)) > 20, f"preload: no sweep came with a read-ahead pass: {stdout['preload']}"
    assert "read-ahead:" not in stdout["rowfile"]
    for name in ("rowfile", "preload", "lru"):
        sweeps = re.search(r"write-back buffer: \d+ rows staged, (\d+) sweeps", stdout[name])
        assert sweeps and int(sweeps.group(1)) > 20, f"{name}: the write-back buffer was not swept: {stdout[name]}"
    assert "write-back buffer:" not in stdout["direct"]
    assert len(tables["mem"]) == 6
    chosen = re.search(r"lookahead: (oracle without read-ahead|read-ahead with LRU): predicted io per step "
                       r"[\d.]+ ms: .* against [\d.]+ ms: .*\(auto, [\d.]+ s at start-up\)", stdout["auto"])
    assert chosen, stdout["auto"]
    assert ("read-ahead:" in stdout["auto"]) == (chosen.group(1) == "read-ahead with LRU")
    # Both options pay for their write-backs: a 700-row buffer under a cache that evicts.
    look = json.loads((tmp_path / "auto/summary.json").read_text())["lookahead"]
    assert look["simulated_evictions_per_step"] > 0 and look["predicted_write_back_s"] > 0, look
    assert look["predicted_random_s"] >= look["predicted_write_back_s"], look
    assert look["predicted_read_ahead_s"] >= look["predicted_write_back_read_ahead_s"] > 0, look
    assert re.search(r"and [\d.]+ ms of write-back sweeps \([\d,]+ rows a step into 700\)", stdout["auto"]), stdout["auto"]
    assert "lookahead: oracle (configured)" in stdout["rowfile"]


def test_a_cache_below_the_steps_in_flight_drains_and_trains_the_in_memory_model(sluice_bin, clicks, tmp_path):
    """A cache set below the rows of the steps in flight (3 steps of about 1,000 distinct rows)
    but above one step's: a step that does not fit beside them waits for them to compute, its
    evictions written back first, and the tables and MLPs equal the in-memory run's bit for bit,
    with the oracle and with LRU."""
    runs = {}
    for name, storage in {"mem": {"mode": "in_memory"},
                          "oracle": dict(OOC, backend="rowfile", cache_rows=1600, write_back_rows=700),
                          "lru": dict(OOC, backend="rowfile", cache_rows=1600, planner="lru", write_back_share=0)}.items():
        cfg = write_config(tmp_path / f"{name}.yaml", clicks, tmp_path / name, **storage)
        out = run(sluice_bin, "train", str(cfg))
        assert out.returncode == 0, out.stderr
        runs[name] = (export(sluice_bin, tmp_path / name), dense_bytes(tmp_path / name), out)
    for name in ("oracle", "lru"):
        assert runs[name][0] == runs["mem"][0] and runs[name][1] == runs["mem"][1], name
        cache = json.loads((tmp_path / name / "summary.json").read_text())["cache"]
        assert 0 < cache["drained_steps"] < cache["steps"] and cache["write_backs"] > 0, (name, cache)
        assert runs[name][2].stderr.count("did not fit beside the") == 1, runs[name][2].stderr


def test_seed_changes_the_model(sluice_bin, clicks, tmp_path):
    """Guards the test above: a different seed must give different tables."""
    a = write_config(tmp_path / "a.yaml", clicks, tmp_path / "a", mode="in_memory")
    assert run(sluice_bin, "train", str(a)).returncode == 0
    assert run(sluice_bin, "train", str(a), "--set", "train.seed=4", "--set", f"run_dir={tmp_path / 'b'}").returncode == 0
    assert export(sluice_bin, tmp_path / "a") != export(sluice_bin, tmp_path / "b")


def test_raw_ids_in_rocksdb_equal_in_memory(sluice_bin, clicks, tmp_path):
    preds = {}
    for name, storage in {"mem": {"mode": "in_memory"}, "kv": dict(OOC, backend="rocksdb")}.items():
        cfg = write_config(tmp_path / f"{name}.yaml", clicks, tmp_path / name, ids="raw", **storage)
        out = run(sluice_bin, "train", str(cfg))
        assert out.returncode == 0, out.stderr
        res = run(sluice_bin, "predict", str(tmp_path / name), "-k", "3000")
        assert res.returncode == 0, res.stderr
        preds[name] = res.stdout
        assert dense_bytes(tmp_path / name)
    assert preds["mem"] == preds["kv"]
    assert dense_bytes(tmp_path / "mem") == dense_bytes(tmp_path / "kv")
    bad = write_config(tmp_path / "bad.yaml", clicks, tmp_path / "bad", ids="raw", **dict(OOC, backend="rowfile"))
    out = run(sluice_bin, "train", str(bad))
    assert out.returncode == 2 and "ids: raw" in out.stderr and "rocksdb" in out.stderr


def test_eval_export_predict_and_learning(sluice_bin, clicks, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", clicks, tmp_path / "r", **OOC)
    out = run(sluice_bin, "train", str(cfg), "--set", "train.epochs=3")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r/metrics.jsonl").read_text().count("\n") == 3
    assert "peak RSS" in (tmp_path / "r/summary.txt").read_text()
    ev = run(sluice_bin, "eval", str(tmp_path / "r"), "--split", "test")
    assert ev.returncode == 0, ev.stderr
    auc = float(ev.stdout.split("AUC ")[1].split()[0])
    assert auc > 0.6, ev.stdout  # the planted log is learnable (a constant predictor scores 0.5)
    tables = export(sluice_bin, tmp_path / "r")
    t0 = np.load(tmp_path / "r/export/table_0.npy")
    assert t0.shape == (4096, 8) and np.isfinite(t0).all()
    pred = run(sluice_bin, "predict", str(tmp_path / "r"), "--split", "test", "-k", "5")
    assert pred.returncode == 0, pred.stderr
    rows = pred.stdout.splitlines()
    assert rows[0] == "sample\tp(click)\tlabel" and len(rows) == 7
    assert all(0 < float(r.split("\t")[1]) < 1 for r in rows[1:6])
    again = run(sluice_bin, "export", str(tmp_path / "r"), "--out", str(tmp_path / "r/export"))
    assert again.returncode == 2 and "exists" in again.stderr
    assert len(tables) == 6


def test_interrupt_then_resume_equals_uninterrupted(sluice_bin, clicks, tmp_path):
    for backend in ("rowfile", "rocksdb"):
        whole = write_config(tmp_path / f"w{backend}.yaml", clicks, tmp_path / f"whole-{backend}",
                             **dict(OOC, backend=backend))
        assert run(sluice_bin, "train", str(whole)).returncode == 0
        part = tmp_path / f"part-{backend}"
        env = dict(os.environ, SLUICE_STOP_AFTER_STEPS="130")  # mid-way through epoch 2
        out = subprocess.run([str(sluice_bin), "train", str(whole), "--set", f"run_dir={part}"],
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 130, out.stderr
        assert "--resume" in out.stderr
        res = run(sluice_bin, "train", str(whole), "--set", f"run_dir={part}", "--resume")
        assert res.returncode == 0, res.stderr
        assert export(sluice_bin, part) == export(sluice_bin, tmp_path / f"whole-{backend}")
        assert dense_bytes(part) == dense_bytes(tmp_path / f"whole-{backend}")


@pytest.mark.parametrize("point", ["step:150", "write_back:200", "checkpoint:1", "rename:1"])
def test_kill9_then_resume_equals_uninterrupted(sluice_bin, clicks, tmp_path, point):
    """SIGKILL at a seeded point (after a step in epoch 2, between a step's write-backs and its
    loads, inside the first checkpoint, before its rename), then --resume from the last complete
    checkpoint: the final model equals an uninterrupted run's."""
    cfg = write_config(tmp_path / "k.yaml", clicks, tmp_path / "whole", **dict(OOC, backend="rowfile"))
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    crashed = tmp_path / "crashed"
    env = dict(os.environ, SLUICE_CRASH_AT=point)
    out = subprocess.run([str(sluice_bin), "train", str(cfg), "--set", f"run_dir={crashed}"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == -9, (out.returncode, out.stderr)
    res = run(sluice_bin, "train", str(cfg), "--set", f"run_dir={crashed}", "--resume")
    assert res.returncode == 0, res.stderr
    assert export(sluice_bin, crashed) == export(sluice_bin, tmp_path / "whole")
    assert not list((crashed / "checkpoints").glob("*.tmp")), "a temporary checkpoint was left"


def test_bad_input_is_one_clear_line(sluice_bin, clicks, tmp_path):
    # A label that is neither 0 nor 1 (a dataset written by hand, not by sluice_prep).
    bad = tmp_path / "badlabel"
    shutil.copytree(clicks, bad)
    rec = np.dtype({"names": ["sparse", "dense", "label"], "formats": [(np.uint64, (6,)), (np.float32, (3,)), np.float32],
                    "offsets": [0, 48, 60], "itemsize": 64})
    data = np.fromfile(bad / "samples/train.bin", dtype=rec)
    data["label"][450] = 2.0
    data.tofile(bad / "samples/train.bin")
    cfg = write_config(tmp_path / "b.yaml", bad, tmp_path / "rb", mode="in_memory")
    out = run(sluice_bin, "train", str(cfg))
    assert out.returncode != 0
    assert "samples.train record 450: label 2.000000 is not 0 or 1" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    # Config errors.
    good = write_config(tmp_path / "g.yaml", clicks, tmp_path / "rg", mode="in_memory")
    for args, message in [(["--set", "model.dimm=4"], "model.dimm"),
                          (["--set", "storage.planner=belady"], "storage.planner"),
                          (["--set", "storage.mode=out_of_core", "--set", "storage.budget=20MiB"],
                           "cannot hold one step's working set"),
                          (["--set", "model.ids=vocab"], "vocab needs the dataset's vocabularies"),
                          (["--set", "task=clustering"], "task 'clustering'")]:
        out = run(sluice_bin, "train", str(good), *args)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    # A link-prediction dataset given to a recommendation config.
    lp = write_config(tmp_path / "lp.yaml", ROOT / "data/demo-graph", tmp_path / "rl", mode="in_memory")
    if (ROOT / "data/demo-graph/manifest.json").exists():
        out = run(sluice_bin, "train", str(lp))
        assert out.returncode == 2 and "click samples" in out.stderr, out.stderr
    # A checkpoint of another model.
    assert run(sluice_bin, "train", str(good)).returncode == 0
    out = run(sluice_bin, "train", str(good), "--resume", "--set", "model.dim=4")
    assert out.returncode == 2 and "model.dim 4 (the run's: 8)" in out.stderr, out.stderr


SCRIPTED = '''
import sys
import torch


class Net(torch.nn.Module):
    """A small click model over the dense features and every table's row, flattened."""

    def __init__(self, dense: int, tables: int, width: int):
        super().__init__()
        self.bottom = torch.nn.Sequential(torch.nn.Linear(dense, 8), torch.nn.ReLU())
        self.top = torch.nn.Sequential(torch.nn.Linear(8 + tables * width, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))

    def forward(self, dense: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return self.top(torch.cat([self.bottom(dense), rows.flatten(1)], 1)).squeeze(1)


class Wrong(torch.nn.Module):
    def forward(self, dense: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return rows.sum(2)  # [B, C]: not one logit per sample


torch.manual_seed(0)
torch.jit.script(Net(3, 6, 9)).save(sys.argv[1])
torch.jit.script(Wrong()).save(sys.argv[2])
'''


def test_torchscript_model_trains_out_of_core_as_in_memory(sluice_bin, clicks, tmp_path):
    pytest.importorskip("torch", reason="python3-torch scripts the model (scripts/install_deps.sh installs it)")
    script = tmp_path / "make.py"
    script.write_text(SCRIPTED)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "net.pt"), str(tmp_path / "wrong.pt")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    tables, dense = {}, {}
    for name, storage in {"mem": {"mode": "in_memory"}, "ooc": dict(OOC, backend="rowfile")}.items():
        cfg = write_config(tmp_path / f"{name}.yaml", clicks, tmp_path / name, **storage)
        out = run(sluice_bin, "train", str(cfg), "--set", f"model.torchscript={tmp_path / 'net.pt'}")
        assert out.returncode == 0, out.stderr
        tables[name], dense[name] = export(sluice_bin, tmp_path / name), dense_bytes(tmp_path / name)
    assert tables["ooc"] == tables["mem"] and dense["ooc"] == dense["mem"]
    ev = run(sluice_bin, "eval", str(tmp_path / "ooc"), "--split", "test")
    assert ev.returncode == 0, ev.stderr
    assert float(ev.stdout.split("AUC ")[1].split()[0]) > 0.6, ev.stdout
    # The scripted network's parameters were trained (they are in the checkpoint, not the file's).
    builtin = write_config(tmp_path / "b.yaml", clicks, tmp_path / "b", mode="in_memory")
    assert run(sluice_bin, "train", str(builtin)).returncode == 0
    assert dense_bytes(tmp_path / "b") != dense["mem"]
    for bad, why in [(tmp_path / "wrong.pt", "must return float32 logits [B]"),
                     (tmp_path / "mem.yaml", "not a TorchScript file"),
                     (tmp_path / "absent.pt", "absent.pt: no such file")]:
        cfg = write_config(tmp_path / "x.yaml", clicks, tmp_path / "x", mode="in_memory")
        out = run(sluice_bin, "train", str(cfg), "--set", f"model.torchscript={bad}", "--overwrite")
        assert out.returncode != 0 and why in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_learning_rate_decay_reaches_rows_and_mlps_and_resumes(sluice_bin, clicks, tmp_path):
    """train.lr_decay with every validation after the first counted as a stall (the test hook):
    the rates halve after epochs 2 and 3; rows and MLPs both train differently than without the
    decay, and a run interrupted after the first decay resumes with the decayed rates."""
    cfg = write_config(tmp_path / "c.yaml", clicks, tmp_path / "d", **OOC)
    sets = ["--set", "train.epochs=4", "--set", "train.lr_decay=0.5", "--set", "train.lr_decay_patience=1"]
    env = dict(os.environ, SLUICE_TEST_STALL="1")

    def train(run_dir: pathlib.Path, *extra: str, stop: int = 0) -> subprocess.CompletedProcess:
        e = dict(env, SLUICE_STOP_AFTER_STEPS=str(stop)) if stop else env
        return subprocess.run([str(sluice_bin), "train", str(cfg), *sets, "--set", f"run_dir={run_dir}", *extra],
                              capture_output=True, text=True, env=e, timeout=300)

    out = train(tmp_path / "d")
    assert out.returncode == 0, out.stderr
    scales = [json.loads(x).get("lr_scale") for x in (tmp_path / "d/metrics.jsonl").read_text().splitlines()]
    assert scales == [None, 0.5, 0.25, None], scales
    latest = ("--checkpoint", "latest")  # the best is epoch 1's, before any decay
    tables = export(sluice_bin, tmp_path / "d", *latest)
    # Only the rows learning (dense_lr 0), then only the MLPs (lr 0): the decay reaches each.
    for rates in ("train.dense_lr=0", "train.lr=0"):
        runs = [tmp_path / f"{rates}-{decay}" for decay in (0.5, 1)]
        for run_dir, decay in zip(runs, (0.5, 1)):
            assert train(run_dir, "--set", rates, "--set", f"train.lr_decay={decay}").returncode == 0
        a, b = (export(sluice_bin, r, *latest) for r in runs)
        assert (a != b) == (rates == "train.dense_lr=0"), rates
        assert (dense_bytes(runs[0]) != dense_bytes(runs[1])) == (rates == "train.lr=0"), rates
    steps = int(json.loads((tmp_path / "d/summary.json").read_text())["units_trained"]) // 4 // 200
    part = train(tmp_path / "i", stop=2 * steps + 10)  # in epoch 3, after the first decay
    assert part.returncode == 130, part.stderr
    assert train(tmp_path / "i", "--resume").returncode == 0
    assert export(sluice_bin, tmp_path / "i", *latest) == tables
    assert dense_bytes(tmp_path / "i") == dense_bytes(tmp_path / "d")
