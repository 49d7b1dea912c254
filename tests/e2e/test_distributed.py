"""Runs across processes (train/dist.h, train/data_parallel.h, docs/distributed.md): the place from
flags or torchrun's variables, the rendezvous through c10d's TCPStore with its timeout, the ranks'
agreement on config and dataset, and data-parallel training in virtual shards (recommendation, node
classification, link prediction): bitwise the same model at world sizes 1, 2 and 3, stopped together,
resumed at another world size."""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import json
import re
import shutil
import time
import zipfile
import zlib

import numpy as np
import pytest

from conftest import ROOT, run

PREP = [sys.executable if "numpy" in sys.modules else "/usr/bin/python3", str(ROOT / "scripts/sluice_prep.py")]


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("dist")
    rng = np.random.default_rng(1)
    edges = "\n".join(f"{a}\t{b}" for a, b in zip(rng.integers(0, 200, 2000), rng.integers(0, 200, 2000)))
    (d / "g.tsv").write_text(edges + "\n")
    out = subprocess.run(PREP + ["edges", str(d / "g.tsv"), "--out", str(d / "ds"), "--partitions", "2"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg = d / "c.yaml"
    cfg.write_text(f"dataset: {d / 'ds'}\nrun_dir: {d / 'run'}\nprogress: false\n"
                   "model: {decoder: distmult, dim: 8}\ntrain: {epochs: 1, batch: 100, lr: 0.1}\n"
                   "dist: {interface: lo, rendezvous_timeout: 20}\n")
    return cfg


@pytest.fixture(scope="module")
def has_gloo(sluice_bin) -> bool:
    """Whether this build has Gloo process groups (`sluice version`): a CUDA PyTorch's libtorch
    has them compiled in but ships no Gloo headers, and such a build refuses runs across processes."""
    out = run(sluice_bin, "version")
    assert out.returncode == 0, out.stderr
    return "distributed: c10d rendezvous, Gloo process groups" in out.stdout


@pytest.fixture(scope="module")
def gloo(has_gloo) -> None:
    """The tests whose ranks join need Gloo process groups."""
    if not has_gloo:
        pytest.skip("this sluice was built without Gloo process groups (sluice version)")


@pytest.fixture(scope="module")
def has_nccl(sluice_bin) -> bool:
    """Whether this build has NCCL process groups (a CUDA build whose PyTorch ships NCCL's headers)."""
    out = run(sluice_bin, "version")
    return re.search(r"distributed: c10d rendezvous, (Gloo and )?NCCL process groups", out.stdout) is not None


def test_a_build_without_gloo_refuses_in_one_line(sluice_bin, config, has_gloo, has_nccl):
    if has_gloo:
        pytest.skip("this sluice has Gloo process groups")
    out = run(sluice_bin, "version")
    if has_nccl:
        assert "distributed: c10d rendezvous, NCCL process groups (no Gloo headers)" in out.stdout, out.stdout
        sets = ["--set", "dist.backend=gloo"]
        said = "dist.backend gloo: this sluice was built without Gloo process groups"
    else:
        assert "distributed: none: built without the Gloo headers" in out.stdout, out.stdout
        sets, said = [], "built without Gloo process groups"
    out = run(sluice_bin, "train", str(config), "--world-size", "2", "--rank", "0", "--master", "127.0.0.1:1", *sets)
    assert out.returncode != 0
    assert said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_nccl_where_it_is_not_built_is_one_line(sluice_bin, config, has_nccl):
    if has_nccl:
        pytest.skip("this sluice has NCCL process groups")
    out = run(sluice_bin, "train", str(config), "--world-size", "1", "--rank", "0", "--master", "127.0.0.1:1",
              "--set", "dist.backend=nccl")
    assert out.returncode != 0
    assert out.stderr.strip() == ("sluice: error: dist.backend nccl: this sluice was built without NCCL process groups "
                                  "(build with -DSLUICE_CUDA=ON against a CUDA PyTorch: docs/gpu.md)"), out.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(sluice_bin, config, rank, world, port, *sets, env=None, flags=True):
    args = [str(sluice_bin), "train", str(config), "--set", f"run_dir={config.parent / f'run{rank}'}"]
    if flags:
        args += ["--world-size", str(world), "--rank", str(rank), "--master", f"127.0.0.1:{port}"]
    for s in sets:
        args += ["--set", s]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))


def finish(procs, timeout=60):
    return [(p.wait(timeout=timeout), *p.communicate()) for p in procs]


NO_SHARDS = "train.virtual_shards is 0: a run across"


def test_ranks_join_and_agree_then_a_run_without_virtual_shards_is_refused(sluice_bin, config, gloo):
    port = free_port()
    results = finish([start(sluice_bin, config, r, 3, port) for r in (2, 0, 1)])
    for rc, out, err in results:
        assert rc != 0
        assert "joined at 127.0.0.1:" in out, (out, err)
        assert NO_SHARDS + " 3 processes cuts each batch into virtual shards" in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_torchrun_variables_place_the_processes(sluice_bin, config, gloo):
    port = str(free_port())
    procs = [start(sluice_bin, config, r, 2, 0, flags=False,
                   env={"WORLD_SIZE": "2", "RANK": str(r), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for r in (0, 1)]
    for rc, out, err in finish(procs):
        assert f"of 2 joined at 127.0.0.1:{port}" in out, (out, err)
        assert NO_SHARDS in err, err


def test_a_config_mismatch_stops_every_rank_naming_the_key_and_ranks(sluice_bin, config, gloo):
    port = free_port()
    results = finish([start(sluice_bin, config, 0, 3, port), start(sluice_bin, config, 1, 3, port),
                      start(sluice_bin, config, 2, 3, port, "train.lr=0.05")])
    for rc, out, err in results:
        assert rc != 0
        assert "rank 2 differs from rank 0 in their config: train.lr is 0.05 on rank 2, 0.1 on rank 0" in err, err
        assert len(err.strip().splitlines()) == 1, err
    # Whether rows travel a step ahead changes the ranks' collectives: they must agree on it.
    results = finish([start(sluice_bin, config, 0, 2, port + 2, "dist.prefetch_rows=on"), start(sluice_bin, config, 1, 2, port + 2,
                                                                        "dist.prefetch_rows=off")])
    for rc, out, err in results:
        assert rc != 0
        assert "rank 1 differs from rank 0 in their config: dist.prefetch_rows is off on rank 1, on on rank 0" in err, err
    # Where a rank runs (its run directory, its storage) may differ: only the trajectory must not.
    results = finish([start(sluice_bin, config, 0, 2, port + 1, "storage.budget=1GiB"),
                      start(sluice_bin, config, 1, 2, port + 1, "storage.budget=2GiB", "threads.total=1")])
    for rc, out, err in results:
        assert NO_SHARDS in err, err


def test_a_rank_that_never_comes_is_named_within_the_rendezvous_timeout(sluice_bin, config, gloo):
    port = free_port()
    t0 = time.monotonic()
    (rc, out, err), = finish([start(sluice_bin, config, 0, 3, port, "dist.rendezvous_timeout=2")], timeout=60)
    assert rc != 0
    assert time.monotonic() - t0 < 30
    assert f"ranks 1, 2 of 3 did not join within 2 s at 127.0.0.1:{port}" in err, err
    # A rank whose master never comes says so too.
    t0 = time.monotonic()
    (rc, out, err), = finish([start(sluice_bin, config, 1, 2, free_port(), "dist.rendezvous_timeout=2")], timeout=60)
    assert rc != 0 and time.monotonic() - t0 < 30
    assert "rank 1 of 2: could not reach the master at 127.0.0.1:" in err, err


def test_a_wrong_master_or_interface_is_one_line_at_once(sluice_bin, config, gloo):
    # The default rendezvous timeout is 120 s: each of these must fail well before it.
    def one_line(rank, *args):
        t0 = time.monotonic()
        out = run(sluice_bin, "train", str(config), "--world-size", "2", "--rank", str(rank), *args)
        assert out.returncode != 0 and time.monotonic() - t0 < 30
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr  # no c10d warning a second while it retries
        return lines[0]

    for rank in (0, 1):
        line = one_line(rank, "--master", "no-such-host.invalid:29500")
        assert (f"rank {rank} of 2: the master's address 'no-such-host.invalid' (--master, else MASTER_ADDR) "
                "does not resolve") in line, line
    line = one_line(0, "--set", "dist.interface=nosuch0")
    assert "dist.interface nosuch0: this machine has no network interface of that name" in line, line
    assert "lo" in line.split("(it has ")[1], line
    # Rank 0 serves the rendezvous at the master's address: one not of this machine is named.
    with socket.socket() as taken:  # a port another program listens on
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(0, "--master", f"127.0.0.1:{port}")
    assert f"rank 0 of 2: port {port} is in use on this machine" in line, line
    line = one_line(0, "--master", "192.0.2.1:29500")
    assert ("rank 0 of 2: rank 0 serves the rendezvous, and 192.0.2.1 (--master, else MASTER_ADDR) is not an address "
            "of this machine") in line, line


def test_an_impossible_place_is_one_clear_line(sluice_bin, config):
    out = run(sluice_bin, "train", str(config), "--world-size", "2", "--rank", "2")
    assert out.returncode != 0
    assert "rank 2 (--rank) is outside a world of 2 (--world-size)" in out.stderr, out.stderr
    env = dict(os.environ, WORLD_SIZE="2")
    out = subprocess.run([str(sluice_bin), "train", str(config)], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "no rank" in out.stderr, out.stderr


LAUNCH = [PREP[0], str(ROOT / "scripts/sluice_launch.py")]


@pytest.fixture(scope="module")
def clicks_config(tmp_path_factory) -> pathlib.Path:
    """A Zipf click log (6 tables) and a config training it out of core in 6 virtual shards."""
    d = tmp_path_factory.mktemp("dp")
    out = subprocess.run(PREP + ["gen-clicks", "--samples", "12000", "--sparse", "6", "--dense", "3",
                                 "--vocab", "6000", "--seed", "4", "--out", str(d / "ds")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg = d / "c.yaml"
    cfg.write_text(f"task: recommendation\ndataset: {d / 'ds'}\nrun_dir: {d / 'run'}\nprogress: false\n"
                   "model: {dim: 8, bottom: [16], top: [16], ids: modulo, table_rows: 4096, linear: true}\n"
                   "train: {epochs: 2, batch: 200, lr: 0.05, adagrad_init: 1.0e-4, seed: 3, virtual_shards: 6}\n"
                   "storage: {mode: out_of_core, cache_rows: 5000, window: 2, run_ahead: 2, planner: oracle}\n"
                   "dist: {interface: lo, rendezvous_timeout: 30, op_timeout: 60, prefetch_rows: on}\n")
    return cfg


def model_bytes(sluice_bin, run_dir: pathlib.Path) -> tuple[dict, bytes]:
    shutil.rmtree(run_dir / "export", ignore_errors=True)  # exported before, at an earlier epoch
    out = run(sluice_bin, "export", str(run_dir), "--out", str(run_dir / "export"))
    assert out.returncode == 0, out.stderr
    tables = {p.name: p.read_bytes() for p in sorted((run_dir / "export").glob("table_*.npy"))}
    latest = (run_dir / "checkpoints/latest").read_text().strip()
    return tables, (run_dir / "checkpoints" / latest / "dense.pt").read_bytes()


def launch(config, n, run_dir, *extra, env=None, timeout=120):
    out = subprocess.run(LAUNCH + ["-n", str(n), "--logs", str(run_dir.parent / f"{run_dir.name}-logs"), "--",
                                   str(SLUICE), "train", str(config), "--set", f"run_dir={run_dir}", *extra],
                         capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    return out


@pytest.fixture(autouse=True)
def _sluice_path(sluice_bin):
    global SLUICE
    SLUICE = sluice_bin


def assert_rows_travel_ahead(stdout: str) -> None:
    """Rank 0's summary: some, not all, of the rows it received from other ranks travelled a step
    ahead (those the step before did not use)."""
    ahead = re.search(r"(\d+) of (\d+) rows from other ranks \(([\d.]+)%\) fetched a step ahead", stdout)
    assert ahead and 0 < int(ahead.group(1)) < int(ahead.group(2)), stdout


def test_recommendation_trains_bitwise_the_same_model_at_world_sizes_1_2_and_3(sluice_bin, clicks_config, gloo):
    base = clicks_config.parent
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'one'}")
    assert out.returncode == 0, out.stderr
    run_one = out.stdout
    assert "data parallel: rank 0 of 1, 6 virtual shards a batch (this rank's: 0-5)" in out.stdout, out.stdout
    reference = model_bytes(sluice_bin, base / "one")
    # The same batches in one piece: another model (the shards' sums differ in their last bits),
    # so the equalities below hold because every world size computes the same shards.
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'whole'}",
              "--set", "train.virtual_shards=0")
    assert out.returncode == 0, out.stderr
    assert model_bytes(sluice_bin, base / "whole")[1] != reference[1]
    # Two ranks by flags, three through the launcher (torchrun's variables, a share of the cores each).
    port = free_port()
    procs = [subprocess.Popen([str(sluice_bin), "train", str(clicks_config), "--set", f"run_dir={base / 'two'}",
                               "--world-size", "2", "--rank", str(r), "--master", f"127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (1, 0)]
    (rc1, out1, err1), (rc0, out0, err0) = finish(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, (err0, err1)
    assert "data parallel: rank 0 of 2, 6 virtual shards a batch (this rank's: 0-2), owns table rows 0-12287 of 24576" in out0, out0
    assert "rank 1: trained 21600 samples" in out1, out1
    # Rank 1 names its own memory against its own plan (only rank 0 writes a summary).
    assert re.search(r"rank 1: trained 21600 samples in [\d.]+ s, peak RSS [\d.]+ MiB \(its plan predicted [\d.]+ MiB\)",
                     out1), out1
    # The next step's rows that a step does not use travel during it (dist.prefetch_rows).
    assert_rows_travel_ahead(out0)
    out = launch(clicks_config, 3, base / "three")
    assert out.returncode == 0, out.stderr
    assert "data parallel: rank 0 of 3, 6 virtual shards a batch (this rank's: 0-1)" in out.stdout, out.stdout
    assert "threads: 1 of 1 cores" in out.stdout, out.stdout  # 2 cores shared by 3 local ranks
    # Each rank's cache holds its third of the tables: a third of the rows a step uses.
    rows_per_step = lambda text: float(re.search(r"cache: \d+ steps, ([\d.]+) distinct rows per step", text).group(1))
    one_rows, three_rows = rows_per_step(run_one), rows_per_step(out.stdout)
    assert 0.2 * one_rows < three_rows < 0.5 * one_rows, (one_rows, three_rows)
    # Tables in memory on two ranks: the same model again.
    out = launch(clicks_config, 2, base / "two-mem", "--set", "storage.mode=in_memory")
    assert out.returncode == 0, out.stderr
    assert model_bytes(sluice_bin, base / "two-mem") == reference
    # Every row at its own step (off, or auto with every rank on one machine): the same model.
    for setting in ("off", "auto"):
        out = launch(clicks_config, 2, base / f"two-{setting}", "--set", f"dist.prefetch_rows={setting}")
        assert out.returncode == 0, out.stderr
        assert re.search(r", 0 of \d+ rows from other ranks \(0%\) fetched a step ahead", out.stdout), out.stdout
        assert model_bytes(sluice_bin, base / f"two-{setting}") == reference
    epochs = lambda run_dir: [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("auc" in e["test"] for e in epochs(base / "one")), epochs(base / "one")  # no valid split: test's
    for name in ("two", "three", "two-mem"):
        assert model_bytes(sluice_bin, base / name) == reference, f"{name} ranks trained another model"
        # Every epoch's loss and validation metrics: validation's steps split between the ranks
        # (rank 0 computed its part), the scores gathered in step order.
        assert [(e["loss"], e["test"]) for e in epochs(base / name)] == [(e["loss"], e["test"]) for e in epochs(base / "one")]
        assert_evaluation_split(base / name, 3 if name == "three" else 2)
        # Rank 0 alone writes the run's checkpoints, metrics and summary; the others keep their
        # tables in RUN/rank-R.
        for r in range(1, 3 if name == "three" else 2):
            own = base / name / f"rank-{r}"
            assert (own / "tables").is_dir() or name == "two-mem"  # in memory: none
            assert not any((own / f).exists() for f in ("checkpoints", "metrics.jsonl", "summary.txt")), own


def test_ranks_whose_caches_drain_while_rows_travel_ahead_train_the_one_process_model(sluice_bin, clicks_config, gloo):
    """Each rank's cache below the rows of its steps in flight, with the next step's rows
    travelling during a step (compute holds step t while it asks for step t + 1): a step that
    does not fit waits only for the steps before the previous one, no rank hangs, and two ranks
    train the one-process model bit for bit."""
    base = clicks_config.parent / "drain"
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'one'}")
    assert out.returncode == 0, out.stderr
    out = launch(clicks_config, 2, base / "two", "--set", "storage.cache_rows=750")
    assert out.returncode == 0, out.stderr
    assert_rows_travel_ahead(out.stdout)
    cache = json.loads((base / "two/summary.json").read_text())["cache"]
    assert 0 < cache["drained_steps"] < cache["steps"], cache
    assert model_bytes(sluice_bin, base / "two") == model_bytes(sluice_bin, base / "one")


def test_a_world_of_one_trains_through_its_process_group_the_one_process_model(sluice_bin, clicks_config, gloo):
    """--world-size 1 with a rank (or torchrun's variables for one process) makes a process group of
    one, which trains the model one process alone does; WORLD_SIZE=1 without a rank stays alone."""
    base = clicks_config.parent
    out = subprocess.run([str(sluice_bin), "train", str(clicks_config), "--set", f"run_dir={base / 'alone'}"],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, WORLD_SIZE="1"))
    assert out.returncode == 0, out.stderr
    assert "joined at" not in out.stdout, out.stdout
    reference = model_bytes(sluice_bin, base / "alone")
    port = free_port()
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'group-of-one'}",
              "--world-size", "1", "--rank", "0", "--master", f"127.0.0.1:{port}")
    assert out.returncode == 0, out.stderr
    assert f"rank 0 of 1 joined at 127.0.0.1:{port} (Gloo on lo)" in out.stdout, out.stdout
    assert "data parallel: rank 0 of 1, 6 virtual shards a batch (this rank's: 0-5)" in out.stdout, out.stdout
    assert model_bytes(sluice_bin, base / "group-of-one") == reference


def gpus_visible(sluice_bin) -> int:
    """0 where sluice sees no GPU (`sluice version`), else how many nvidia-smi lists (at least 1)."""
    if "GPU: none" in run(sluice_bin, "version").stdout:
        return 0
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout if smi else ""
    return max(1, sum(line.startswith("GPU ") for line in listed.splitlines()))


def test_nccl_trains_the_one_process_model(sluice_bin, clicks_config, has_nccl):
    """dist.backend nccl: the rows and gradients travel through each rank's GPU, and the model is
    the one process alone trains: a world of one on one GPU, and of two where two are visible."""
    if not has_nccl:
        pytest.skip("this sluice was built without NCCL process groups (sluice version)")
    gpus = gpus_visible(sluice_bin)
    if gpus == 0:
        pytest.skip("no GPU visible (sluice version)")
    base = clicks_config.parent
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'nccl-alone'}")
    assert out.returncode == 0, out.stderr
    reference = model_bytes(sluice_bin, base / "nccl-alone")
    port = free_port()
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'nccl-one'}",
              "--set", "dist.backend=nccl", "--world-size", "1", "--rank", "0", "--master", f"127.0.0.1:{port}")
    assert out.returncode == 0, out.stderr
    assert f"rank 0 of 1 joined at 127.0.0.1:{port} (NCCL on cuda:0)" in out.stdout, out.stdout
    assert model_bytes(sluice_bin, base / "nccl-one") == reference
    if gpus >= 2:  # one GPU a rank (LOCAL_RANK from the launcher)
        out = launch(clicks_config, 2, base / "nccl-two", "--set", "dist.backend=nccl")
        assert out.returncode == 0, out.stderr
        assert model_bytes(sluice_bin, base / "nccl-two") == reference


def stop_two_ranks(sluice_bin, config, run_dir, steps: int, *extra) -> None:
    """Two ranks, rank 1 alone told to stop after `steps` steps: both stop there, interrupted."""
    port = free_port()
    procs = [subprocess.Popen([str(sluice_bin), "train", str(config), "--set", f"run_dir={run_dir}", *extra,
                               "--world-size", "2", "--rank", str(r), "--master", f"127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, **({"SLUICE_STOP_AFTER_STEPS": str(steps)} if r == 1 else {})))
             for r in (0, 1)]
    for rc, out, err in finish(procs, timeout=120):
        assert rc != 0 and "interrupted" in err, (out, err)


def test_ranks_stop_together_and_resume_at_another_world_size_bitwise(sluice_bin, clicks_config, gloo):
    base = clicks_config.parent
    reference = base / "ref-resume"
    assert run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={reference}").returncode == 0
    # Rank 1 alone is told to stop after 50 steps: its wish travels with the step's exchange, so
    # both ranks stop after step 50 and rank 0 writes the checkpoint.
    stop_two_ranks(sluice_bin, clicks_config, base / "split", 50)
    assert (base / "split/checkpoints/latest").read_text().strip() == "epoch-0-step-50"
    assert not (base / "split/rank-1/checkpoints").exists()
    # Three ranks resume rank 0's checkpoint (rank 0 reads --resume; the others follow it).
    out = launch(clicks_config, 3, base / "split", "--resume")
    assert out.returncode == 0, out.stderr
    assert model_bytes(sluice_bin, base / "split") == model_bytes(sluice_bin, reference)


def test_data_parallel_settings_that_cannot_work_are_one_line(sluice_bin, clicks_config, gloo):
    base = clicks_config.parent
    for sets, said in ((["train.virtual_shards=0"], "train.virtual_shards is 0: a run across 2 processes"),
                       (["train.virtual_shards=1"], "train.virtual_shards is 1, below the world size 2")):
        out = launch(clicks_config, 2, base / "bad", "--overwrite", *[x for s in sets for x in ("--set", s)])
        assert out.returncode != 0
        assert said in out.stderr, out.stderr
    # One process: more shards than samples in a batch.
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'bad1'}",
              "--set", "train.virtual_shards=201")
    assert out.returncode != 0 and "more than the 200 samples of a batch" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    # Tables sharded by row range need dense row numbers.
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'bad2'}",
              "--set", "storage.backend=rocksdb")
    assert out.returncode != 0 and "it needs dense tables" in out.stderr, out.stderr
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'bad3'}", "--set", "device.type=emulated")
    assert out.returncode != 0 and "train.virtual_shards with device.type emulated: training in virtual shards runs on the CPU only" in out.stderr, out.stderr


def checkpoint_bytes(run_dir: pathlib.Path) -> dict:
    """The latest checkpoint's tables (rows with their optimizer state), dense parameters and the
    dense optimizer's tensors (libtorch names its state by parameter address, so the archive's
    code differs between processes: its tensors are compared, as a sorted list)."""
    latest = run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()
    with zipfile.ZipFile(latest / "dense_optimizer.pt") as z:
        state = sorted(z.read(n) for n in z.namelist() if "/data/" in n)
    return {"rows.bin": table_bytes(latest), "dense.pt": (latest / "dense.pt").read_bytes(),
            "dense optimizer tensors": state}  # non-empty: Adam's moments


def table_bytes(checkpoint: pathlib.Path, name: str = "rows.bin") -> bytes:
    """A checkpoint's tables in the row file's layout: `name`, or the ranks' shards laid end to
    end as their manifest says (each shard exactly its rows), padded to 512 bytes as the whole file is."""
    manifest = checkpoint / f"{name}.shards.json"
    if not manifest.exists():
        return (checkpoint / name).read_bytes()
    m = json.loads(manifest.read_text())
    world = m["world_size"]
    assert not (checkpoint / name).exists()
    parts = []
    for r in range(world):
        data = (checkpoint / f"{name}.shard-{r}-of-{world}").read_bytes()
        assert len(data) == (m["bounds"][r + 1] - m["bounds"][r]) * m["row_bytes"] == m["shards"][r]["bytes"]
        assert zlib.crc32(data) == m["shards"][r]["crc32"]
        parts.append(data)
    whole = b"".join(parts)
    return whole + bytes(-len(whole) % 512)


def test_two_ranks_then_three_then_one_equal_one_process_for_four_epochs(sluice_bin, clicks_config, gloo):
    base = clicks_config.parent
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'four'}", "--set", "train.epochs=4")
    assert out.returncode == 0, out.stderr
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'three-epochs'}", "--set", "train.epochs=3")
    assert out.returncode == 0, out.stderr
    run_dir = base / "reshard"
    out = launch(clicks_config, 2, run_dir, "--set", "train.epochs=2")
    assert out.returncode == 0, out.stderr
    # Two phases: each rank wrote its own rows (its shard) into the checkpoint, rank 0 the manifest.
    latest = run_dir / "checkpoints/epoch-2-step-0"
    manifest = json.loads((latest / "rows.bin.shards.json").read_text())
    assert manifest["world_size"] == 2 and manifest["bounds"] == [0, 12288, 24576], manifest
    assert sorted(p.name for p in latest.glob("rows.bin*")) == [
        "rows.bin.shard-0-of-2", "rows.bin.shard-1-of-2", "rows.bin.shards.json"]
    out = launch(clicks_config, 3, run_dir, "--set", "train.epochs=3", "--resume")
    assert out.returncode == 0, out.stderr
    assert "owns table rows 0-8191 of 24576" in out.stdout, out.stdout
    # Resharded from 2 to 3: the 3 ranks' checkpoint (tables, dense state, optimizer state) and its
    # export (the shards assembled) are one process's after 3 epochs.
    assert json.loads((run_dir / "checkpoints/epoch-3-step-0/rows.bin.shards.json").read_text())["world_size"] == 3
    assert checkpoint_bytes(run_dir) == checkpoint_bytes(base / "three-epochs")
    assert model_bytes(sluice_bin, run_dir) == model_bytes(sluice_bin, base / "three-epochs")
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={run_dir}", "--set", "train.epochs=4", "--resume")
    assert out.returncode == 0, out.stderr
    assert (run_dir / "checkpoints/latest").read_text().strip() == "epoch-4-step-0"
    assert checkpoint_bytes(run_dir) == checkpoint_bytes(base / "four")
    assert checkpoint_bytes(run_dir)["dense optimizer tensors"]
    assert model_bytes(sluice_bin, run_dir) == model_bytes(sluice_bin, base / "four")


@pytest.mark.parametrize("victim,sig,named", [(2, signal.SIGKILL, "rank 2"), (1, signal.SIGSTOP, "rank 1"),
                                              (0, signal.SIGKILL, "rank 0 (the store's host)")])
def test_a_rank_that_dies_or_stops_is_named_and_the_run_resumes_exactly(sluice_bin, clicks_config, gloo,
                                                                        victim, sig, named):
    base = clicks_config.parent
    run_dir = base / f"victim-{victim}-{sig.name}"
    sets = ["--set", "train.epochs=12", "--set", "dist.op_timeout=4"]
    port = free_port()
    procs = [subprocess.Popen([str(sluice_bin), "train", str(clicks_config), "--set", f"run_dir={run_dir}", *sets,
                               "--world-size", "3", "--rank", str(r), "--master", f"127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(3)]
    while not (run_dir / "checkpoints/latest").exists():  # a complete checkpoint to resume
        assert procs[0].poll() is None, procs[0].communicate()
        time.sleep(0.05)
    procs[victim].send_signal(sig)
    t0 = time.monotonic()
    for r, p in enumerate(procs):
        if r == victim:
            continue
        rc = p.wait(timeout=4 + 30)
        err = p.communicate()[1]
        assert rc != 0
        assert rc > 0, f"rank {r} ended by signal {-rc}"
        assert f"{named} did not exchange" in err and len(err.strip().splitlines()) == 1, err
    assert time.monotonic() - t0 < 4 + 30
    procs[victim].kill()
    procs[victim].communicate()
    # Two ranks resume rank 0's last complete checkpoint and end where one process does.
    out = launch(clicks_config, 2, run_dir, *sets, "--resume")
    assert out.returncode == 0, out.stderr
    reference = base / "twelve"
    if not reference.exists():
        assert run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={reference}", *sets).returncode == 0
    assert checkpoint_bytes(run_dir) == checkpoint_bytes(reference)


def test_shards_left_empty_by_the_last_short_batch_train_the_same_model(sluice_bin, clicks_config, gloo):
    """10,800 train samples in batches of 1,024: the last batch's 560 samples leave 440 of its
    1,000 shards empty (every rank still takes part in the exchange)."""
    base = clicks_config.parent
    sets = ["--set", "train.batch=1024", "--set", "train.virtual_shards=1000", "--set", "storage.cache_rows=0",
            "--set", "train.epochs=1"]
    out = run(sluice_bin, "train", str(clicks_config), "--set", f"run_dir={base / 'short1'}", *sets)
    assert out.returncode == 0, out.stderr
    out = launch(clicks_config, 3, base / "short3", *sets)
    assert out.returncode == 0, out.stderr
    assert model_bytes(sluice_bin, base / "short3") == model_bytes(sluice_bin, base / "short1")


# Node classification across processes: features read from each rank's copy of the dataset, the
# dense gradients exchanged in virtual shards.

@pytest.fixture(scope="module")
def nc_config(tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("nc-dp")
    out = subprocess.run(PREP + ["gen-nc", "--nodes", "3000", "--edges", "24000", "--features", "16", "--classes", "4",
                                 "--seed", "6", "--out", str(d / "ds")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg = d / "nc.yaml"
    cfg.write_text(f"task: node_classification\ndataset: {d / 'ds'}\nrun_dir: {d / 'run'}\nprogress: false\n"
                   "model: {kind: graphsage, layers: 2, hidden: 16, fanouts: [5, 3], dropout: 0.3}\n"
                   "train: {epochs: 2, batch: 128, lr: 0.01, seed: 2, virtual_shards: 6}\n"
                   "eval: {every: 1, fanouts: [5, 3], batch: 64}\n"
                   "storage: {mode: out_of_core, cache_rows: 2800, run_ahead: 2}\n"
                   "dist: {interface: lo, rendezvous_timeout: 30, op_timeout: 60, prefetch_rows: on}\n")
    return cfg


def nc_model(run_dir: pathlib.Path) -> dict:
    """The latest checkpoint's parameters and the optimizer's tensors, and every epoch's loss and
    validation metrics."""
    latest = run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()
    with zipfile.ZipFile(latest / "dense_optimizer.pt") as z:
        state = sorted(z.read(n) for n in z.namelist() if "/data/" in n)
    epochs = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"dense.pt": (latest / "dense.pt").read_bytes(), "optimizer tensors": state,
            "losses": [e["loss"] for e in epochs], "valid": [e["valid"] for e in epochs]}


def assert_evaluation_split(run_dir: pathlib.Path, ranks: int) -> None:
    """Rank 0 computed its part of evaluation's steps, not all of them (its summary): of a pass of
    S steps at most ceil(S / ranks)."""
    s = json.loads((run_dir / "summary.json").read_text())["evaluation"]
    assert 0 < s["steps_computed"] <= s["steps"] / ranks + s["passes"], s


def test_node_classification_trains_bitwise_the_same_model_at_world_sizes_1_2_and_3(sluice_bin, nc_config, gloo):
    base = nc_config.parent
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'one'}")
    assert out.returncode == 0, out.stderr
    assert "data parallel: rank 0 of 1, 6 virtual shards a batch (this rank's: 0-5), no tables to shard" in out.stdout, out.stdout
    reference = nc_model(base / "one")
    assert reference["optimizer tensors"] and len(reference["losses"]) == 2
    # The same batches in one piece sample and sum otherwise: another model.
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'whole'}", "--set", "train.virtual_shards=0")
    assert out.returncode == 0, out.stderr
    assert nc_model(base / "whole")["dense.pt"] != reference["dense.pt"]
    for n in (2, 3):
        out = launch(nc_config, n, base / f"ranks-{n}")
        assert out.returncode == 0, out.stderr
        assert f"data parallel: rank 0 of {n}, 6 virtual shards a batch" in out.stdout, out.stdout
        assert nc_model(base / f"ranks-{n}") == reference, f"{n} ranks trained another model"
        # Validation's 5 steps a pass are split between the ranks; every rank reports them all.
        assert_evaluation_split(base / f"ranks-{n}", n)
    # Features in memory on two ranks: the same model again.
    out = launch(nc_config, 2, base / "two-mem", "--set", "storage.mode=in_memory")
    assert out.returncode == 0, out.stderr
    assert nc_model(base / "two-mem") == reference
    # Validation over every neighbour, layer by layer: each rank computes its part of every
    # layer's steps and the ranks share the outputs (through each rank's row file out of core).
    full = ["--set", "eval.fanouts=[]"]
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'one-full'}", *full)
    assert out.returncode == 0, out.stderr
    layerwise = nc_model(base / "one-full")
    assert layerwise["dense.pt"] == reference["dense.pt"] and layerwise["valid"] != reference["valid"]
    for n, mode in ((3, "out_of_core"), (2, "in_memory")):
        out = launch(nc_config, n, base / f"full-{n}", *full, "--set", f"storage.mode={mode}")
        assert out.returncode == 0, out.stderr
        assert nc_model(base / f"full-{n}") == layerwise, f"{n} ranks {mode}: another layer-wise validation"
        assert_evaluation_split(base / f"full-{n}", n)


def test_node_classification_through_the_spill_trains_bitwise_the_same_model_at_world_sizes_1_2_and_3(
        sluice_bin, nc_config, gloo):
    """storage.spill_steps in virtual shards: each rank's spill lists, sweeps and packs its own
    units (a step's shards of this rank), the next epoch's first units during this epoch's last,
    and the model is the one without the spill (the packs hold the file's bytes)."""
    base = nc_config.parent
    spill = ["--set", "storage.cache_rows=2200", "--set", "storage.planner=static", "--set", "storage.run_ahead=1",
             "--set", "storage.spill_steps=3", "--set", "train.epochs=3"]
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'spill-ref'}", "--set", "train.epochs=3")
    assert out.returncode == 0, out.stderr
    spilled = {}
    for n in (1, 2, 3):
        run_dir = base / f"spill-{n}"
        out = (run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={run_dir}", *spill) if n == 1
               else launch(nc_config, n, run_dir, *spill))
        assert out.returncode == 0, out.stderr
        assert "spill: every 3 steps" in out.stdout, out.stdout
        assert nc_model(run_dir) == nc_model(base / "spill-ref"), f"{n} ranks through the spill trained another model"
        # Rank 0's spill (rank R's summary is in its own run directory): its units' loads came
        # from packs, and epochs 2 and 3 began with the packs the epoch before filled.
        s = json.loads((run_dir / "summary.json").read_text())["spill"]
        assert s["rows_served"] > 0 and s["packs_dropped"] == 0, s
        assert s["full_sweeps"] == 1 and s["passes_continued"] == 2, s
        assert not (run_dir / "features.spill").exists()
        spilled[n] = s
    # Stopped after step 5 on two ranks, resumed on three: the resumed epoch's units start at
    # step 6, the next epoch's listing at step 0 of its own units.
    stop_two_ranks(sluice_bin, nc_config, base / "spill-split", 5, *spill)
    out = launch(nc_config, 3, base / "spill-split", *spill, "--resume")
    assert out.returncode == 0, out.stderr
    assert nc_model(base / "spill-split")["dense.pt"] == nc_model(base / "spill-ref")["dense.pt"]
    s = json.loads((base / "spill-split/summary.json").read_text())["spill"]
    assert s["full_sweeps"] == 1 and s["passes_continued"] == 2, s
    # Its loads are a part of the uninterrupted run's (from step 5 on, its cache cold at the
    # start, where every row is in the first unit's pack), so no more of them miss their packs:
    # epoch 2's first units listed from the units after step 5 would.
    assert s["rows_direct"] <= spilled[3]["rows_direct"], (s, spilled[3])


def test_node_classification_stopped_on_one_rank_resumes_at_another_world_size_bitwise(sluice_bin, nc_config, gloo):
    base = nc_config.parent
    reference = base / "nc-ref-resume"
    assert run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={reference}").returncode == 0
    stop_two_ranks(sluice_bin, nc_config, base / "nc-split", 5)
    assert (base / "nc-split/checkpoints/latest").read_text().strip() == "epoch-0-step-5"
    out = launch(nc_config, 3, base / "nc-split", "--resume")
    assert out.returncode == 0, out.stderr
    assert nc_model(base / "nc-split")["dense.pt"] == nc_model(reference)["dense.pt"]


def nc_embedding_model(sluice_bin, run_dir: pathlib.Path) -> dict:
    """nc_model, the latest checkpoint's node embeddings with their optimizer state (whole or in
    the ranks' shards) and what `sluice export` infers from it (every node's probabilities);
    without the validation metrics (the tests compare those where the runs validate alike)."""
    model = nc_model(run_dir)
    del model["valid"]
    latest = run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()
    table = table_bytes(latest, "nodes.bin")  # padded as a row file is (4 KiB) or to 512 bytes (shards)
    rows = 3000 * (8 + 1) * 4  # each node's embedding and its row-wise Adagrad state
    assert len(table) >= rows and not any(table[rows:])
    model["nodes.bin"] = table[:rows]
    # Export infers over every neighbour: a hub's 700 take more than the training cache holds,
    # so it reads with the budget's cache, nothing pinned (storage keys are not part of the model).
    cfg = run_dir / "config.yaml"
    cfg.write_text(re.sub(r"cache_rows: \d+", "cache_rows: 0", cfg.read_text()).replace('planner: "static"', 'planner: "oracle"'))
    shutil.rmtree(run_dir / "export", ignore_errors=True)
    out = run(sluice_bin, "export", str(run_dir), "--out", str(run_dir / "export"))
    assert out.returncode == 0, out.stderr
    model["probabilities"] = (run_dir / "export/probabilities.npy").read_bytes()
    return model


# Learnable node embeddings (model.embedding_dim) instead of features: the table sharded by row
# range, each rank's rows through its own cache, the step's rows from their owners.
# Smaller steps than the features' (24 seeds, fanouts 3, 2) so a cache of a third of the rows
# holds the steps in flight.
NC_EMB = ["--set", "model.embedding_dim=8", "--set", "train.embedding_optimizer=rowwise_adagrad",
          "--set", "train.embedding_lr=0.1", "--set", "train.batch=24", "--set", "model.fanouts=[3, 2]",
          "--set", "eval.batch=64"]


def test_node_classification_learnable_embeddings_train_bitwise_the_same_model_at_world_sizes_1_2_and_3(
        sluice_bin, nc_config, gloo):
    base = nc_config.parent
    # One process running the 6 shards out of core, a cache of 900 of the 3,000 rows.
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'emb-one'}", *NC_EMB,
              "--set", "storage.cache_rows=900")
    assert out.returncode == 0, out.stderr
    assert "owns table rows 0-2999 of 3000" in out.stdout, out.stdout
    reference = nc_embedding_model(sluice_bin, base / "emb-one")
    assert len(reference["losses"]) == 2
    # Each epoch's validation ran.
    valid = [json.loads(l)["valid"]["accuracy"] for l in (base / "emb-one/metrics.jsonl").read_text().splitlines()]
    # The shards' row updates train the embeddings: 0.24 when they keep their initial values.
    assert len(valid) == 2 and valid[-1] > 0.7, valid
    # The same run in memory, validating over every neighbour (layer by layer): the same model.
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'emb-one-mem'}", *NC_EMB,
              "--set", "storage.mode=in_memory", "--set", "eval.fanouts=[]")
    assert out.returncode == 0, out.stderr
    assert nc_embedding_model(sluice_bin, base / "emb-one-mem") == reference
    full = [json.loads(l)["valid"] for l in (base / "emb-one-mem/metrics.jsonl").read_text().splitlines()]
    for n, cache, planner in ((2, 900, "static"), (3, 350, "oracle")):  # static: each rank pins its hottest rows
        out = launch(nc_config, n, base / f"emb-{n}", *NC_EMB, "--set", f"storage.cache_rows={cache}",
                     "--set", f"storage.planner={planner}")
        assert out.returncode == 0, out.stderr
        assert f"data parallel: rank 0 of {n}, 6 virtual shards a batch" in out.stdout, out.stdout
        assert f"owns table rows 0-{3000 // n - 1} of 3000" in out.stdout, out.stdout
        assert_rows_travel_ahead(out.stdout)
        latest = base / f"emb-{n}/checkpoints" / (base / f"emb-{n}/checkpoints/latest").read_text().strip()
        assert (latest / f"nodes.bin.shard-{n - 1}-of-{n}").exists() and not (latest / "nodes.bin").exists()
        # Rank 1's table file stores its own rows (a third or half of the table), the others holes.
        f = os.stat(base / f"emb-{n}/rank-1/tables/nodes.bin")
        assert f.st_blocks * 512 < f.st_size * (0.6 if n == 2 else 0.45), (f.st_size, f.st_blocks)
        model = nc_embedding_model(sluice_bin, base / f"emb-{n}")
        for key in reference:
            assert model[key] == reference[key], f"{n} ranks: {key} differs"
        # Rank 0's metrics: the same validation as one process (each rank computed its part).
        assert [json.loads(l)["valid"]["accuracy"] for l in (base / f"emb-{n}/metrics.jsonl").read_text().splitlines()] == valid
        assert_evaluation_split(base / f"emb-{n}", n)
    out = launch(nc_config, 2, base / "emb-2-mem", *NC_EMB, "--set", "storage.mode=in_memory", "--set", "eval.fanouts=[]")
    assert out.returncode == 0, out.stderr
    assert_rows_travel_ahead(out.stdout)
    assert nc_embedding_model(sluice_bin, base / "emb-2-mem") == reference
    assert [json.loads(l)["valid"] for l in (base / "emb-2-mem/metrics.jsonl").read_text().splitlines()] == full
    # Layer by layer out of core on 3 ranks: each step of the first layer reads the rows this rank
    # owns through its cache and the others from their owners, no rank holding every embedding.
    # (Its steps read up to 557 of a rank's 1,000 rows: the budget's cache, not one of 900.)
    out = launch(nc_config, 3, base / "emb-3-full", *NC_EMB, "--set", "storage.cache_rows=0",
                 "--set", "storage.planner=oracle", "--set", "eval.fanouts=[]")
    assert out.returncode == 0, out.stderr
    assert nc_embedding_model(sluice_bin, base / "emb-3-full") == reference
    assert [json.loads(l)["valid"] for l in (base / "emb-3-full/metrics.jsonl").read_text().splitlines()] == full
    assert_evaluation_split(base / "emb-3-full", 3)
    # Stopped after step 5 on 2 ranks out of core, resumed on 3 out of core, then in one process
    # in memory for a third epoch: one process's 3 epochs.
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'emb-three'}", *NC_EMB,
              "--set", "train.epochs=3")
    assert out.returncode == 0, out.stderr
    stop_two_ranks(sluice_bin, nc_config, base / "emb-split", 5, *NC_EMB, "--set", "storage.cache_rows=500")
    assert (base / "emb-split/checkpoints/latest").read_text().strip() == "epoch-0-step-5"
    out = launch(nc_config, 3, base / "emb-split", "--resume", *NC_EMB, "--set", "storage.cache_rows=350")
    assert out.returncode == 0, out.stderr
    def resumed(model: dict) -> dict:  # the resumed epoch's mean loss covers its steps after the resume
        return dict(model, losses=model["losses"][1:])
    assert resumed(nc_embedding_model(sluice_bin, base / "emb-split")) == resumed(reference)
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'emb-split'}", "--resume", *NC_EMB,
              "--set", "storage.mode=in_memory", "--set", "train.epochs=3")
    assert out.returncode == 0, out.stderr
    assert resumed(nc_embedding_model(sluice_bin, base / "emb-split")) == resumed(nc_embedding_model(sluice_bin, base / "emb-three"))


def test_node_classification_settings_that_cannot_shard_are_one_line(sluice_bin, nc_config, gloo):
    base = nc_config.parent
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'nc-bad2'}", "--set", "train.virtual_shards=129")
    assert out.returncode != 0 and "more than the 128 training nodes of a batch" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    out = run(sluice_bin, "train", str(nc_config), "--set", f"run_dir={base / 'nc-bad3'}", "--set", "device.type=emulated")
    assert out.returncode != 0 and "train.virtual_shards with device.type emulated: training in virtual shards runs on the CPU only" in out.stderr, out.stderr


# Link prediction across processes: the node table sharded by row range, each step's edges cut
# into virtual shards with their own negatives, rows from their owners.

def make_lp_config(d: pathlib.Path, nodes: int, edges: int, batch: str, storage: str) -> pathlib.Path:
    """A generated graph of `nodes` ids (Zipf-skewed tails, 5 relations) prepared in 2 partitions,
    and a DistMult config with 6 virtual shards; `batch`: the train keys of a batch, `storage`:
    the storage map."""
    rng = np.random.default_rng(3)
    triples = zip(rng.integers(0, nodes, edges), rng.integers(0, 5, edges), (rng.zipf(1.5, edges) * 7) % nodes)
    (d / "g.tsv").write_text("\n".join(f"{h}\t{r}\t{t}" for h, r, t in triples) + "\n")
    out = subprocess.run(PREP + ["edges", str(d / "g.tsv"), "--src-col", "0", "--rel-col", "1", "--dst-col", "2",
                                 "--out", str(d / "ds"), "--partitions", "2", "--valid-frac", "0.05",
                                 "--test-frac", "0.05"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg = d / "lp.yaml"
    cfg.write_text(f"dataset: {d / 'ds'}\nrun_dir: {d / 'run'}\nprogress: false\n"
                   "model: {decoder: distmult, dim: 8, reciprocal: true, entity_dropout: 0.2}\n"
                   f"train: {{epochs: 2, {batch}, lr: 0.1, schedule: shuffle, seed: 4,\n"
                   "        regularizer: n3, regularization: 0.01, virtual_shards: 6}\n"
                   f"eval: {{every: 1}}\nstorage: {storage}\n"
                   "dist: {interface: lo, rendezvous_timeout: 30, op_timeout: 60, prefetch_rows: on}\n")
    return cfg


@pytest.fixture(scope="module")
def lp_config(tmp_path_factory) -> pathlib.Path:
    return make_lp_config(tmp_path_factory.mktemp("lp-dp"), 300, 4000, "batch: 120, chunks: 4, negatives: 20",
                          "{mode: in_memory}")


def lp_model(sluice_bin, run_dir: pathlib.Path) -> dict:
    """The exported embeddings, the latest checkpoint's relation optimizer tensors, every epoch's
    loss and validation MRR, and the test split's metrics from `sluice eval`."""
    shutil.rmtree(run_dir / "export", ignore_errors=True)
    out = run(sluice_bin, "export", str(run_dir), "--out", str(run_dir / "export"))
    assert out.returncode == 0, out.stderr
    latest = run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()
    with zipfile.ZipFile(latest / "relation_optimizer.pt") as z:
        state = sorted(z.read(n) for n in z.namelist() if "/data/" in n)
    metrics = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    test = run(sluice_bin, "eval", str(run_dir), "--split", "test", "--json")
    assert test.returncode == 0, test.stderr
    return {"nodes": (run_dir / "export/nodes.npy").read_bytes(), "relations": (run_dir / "export/relations.npy").read_bytes(),
            "optimizer tensors": state, "losses": [m["loss"] for m in metrics],
            "valid": [m["valid"]["mrr"] for m in metrics], "test": json.loads(test.stdout)["metrics"]}


@pytest.mark.parametrize("sets", [[], ["model.decoder=complex", "model.reciprocal=false"],
                                  ["eval.exact_max_nodes=100", "eval.sampled_negatives=150"]],
                         ids=["distmult-reciprocal", "complex-both-sides", "ranked-against-sampled-nodes"])
def test_link_prediction_trains_bitwise_the_same_model_at_world_sizes_1_2_and_3(sluice_bin, lp_config, gloo, sets):
    base = lp_config.parent / ("-".join(sets) or "plain")
    extra = [a for s in sets for a in ("--set", s)]
    out = run(sluice_bin, "train", str(lp_config), "--set", f"run_dir={base / 'one'}", *extra)
    assert out.returncode == 0, out.stderr
    assert "data parallel: rank 0 of 1, 6 virtual shards a batch (this rank's: 0-5), owns table rows 0-383 of 384" in out.stdout, out.stdout
    reference = lp_model(sluice_bin, base / "one")
    assert reference["optimizer tensors"] and len(reference["losses"]) == 2 and all(reference["valid"])
    # The same batches in one piece draw other negatives and sum otherwise: another model.
    out = run(sluice_bin, "train", str(lp_config), "--set", f"run_dir={base / 'whole'}", "--set", "train.virtual_shards=0", *extra)
    assert out.returncode == 0, out.stderr
    assert lp_model(sluice_bin, base / "whole")["nodes"] != reference["nodes"]
    for n in (2, 3):
        out = launch(lp_config, n, base / f"ranks-{n}", *extra)
        assert out.returncode == 0, out.stderr
        owned, held = {2: ("0-191", "12.00 KiB"), 3: ("0-127", "8.00 KiB")}[n]
        assert f"data parallel: rank 0 of {n}, 6 virtual shards a batch" in out.stdout and f"owns table rows {owned} of 384" in out.stdout, out.stdout
        assert f"node table 24.00 KiB (embeddings + Adagrad state), this rank holds its rows: {held}" in out.stdout, out.stdout
        assert_rows_travel_ahead(out.stdout)
        # Two phases: each rank's rows are its shard of the checkpoint, rank 0 wrote the manifest.
        latest = base / f"ranks-{n}/checkpoints/epoch-2-step-0"
        assert sorted(p.name for p in latest.glob("nodes.bin*")) == [f"nodes.bin.shard-{r}-of-{n}" for r in range(n)] + ["nodes.bin.shards.json"]
        assert lp_model(sluice_bin, base / f"ranks-{n}") == reference, f"{n} ranks trained another model"


def test_link_prediction_stopped_on_one_rank_resumes_at_other_world_sizes_bitwise(sluice_bin, lp_config, gloo):
    """Two ranks stop after step 20 of 30 (rank 1 alone told to), three resume to the end of epoch 2
    (resharded 2 -> 3), one process resumes to the end of epoch 3 (3 -> 1): one process's 3 epochs."""
    base = lp_config.parent
    reference = base / "lp-three-epochs"
    assert run(sluice_bin, "train", str(lp_config), "--set", f"run_dir={reference}", "--set", "train.epochs=3").returncode == 0
    split = base / "lp-split"
    stop_two_ranks(sluice_bin, lp_config, split, 20)
    assert (split / "checkpoints/latest").read_text().strip() == "epoch-0-step-20"
    out = launch(lp_config, 3, split, "--resume")
    assert out.returncode == 0, out.stderr
    assert json.loads((split / "checkpoints/epoch-2-step-0/nodes.bin.shards.json").read_text())["world_size"] == 3
    out = run(sluice_bin, "train", str(lp_config), "--set", f"run_dir={split}", "--set", "train.epochs=3", "--resume")
    assert out.returncode == 0, out.stderr
    assert (split / "checkpoints/latest").read_text().strip() == "epoch-3-step-0"
    ours, theirs = lp_model(sluice_bin, split), lp_model(sluice_bin, reference)
    for key in ("nodes", "relations", "optimizer tensors", "test"):
        assert ours[key] == theirs[key], key


@pytest.fixture(scope="module")
def lp_ooc_config(tmp_path_factory) -> pathlib.Path:
    """A graph of 2,665 nodes (a table of 2,688 rows) whose steps use a few hundred rows: each
    process's rows out of core through a row cache far smaller than its share."""
    return make_lp_config(tmp_path_factory.mktemp("lp-ooc"), 3000, 6000, "batch: 60, chunks: 2, negatives: 10",
                          "{mode: out_of_core, run_ahead: 1}")


def rows_written_back(stdout: str) -> int:
    m = re.search(r"row cache: rows loaded (\d+), written back (\d+)", stdout)
    assert m, stdout
    return int(m.group(2))


def test_link_prediction_out_of_core_trains_the_in_memory_model_at_world_sizes_1_2_and_3(sluice_bin, lp_ooc_config, gloo):
    """Each process's rows through its own row cache (a fifth to a quarter of its share, dirty rows
    evicted and read back) train bitwise the model one process trains in memory; a run stopped out
    of core on 2 ranks resumes out of core on 3 and then in memory in one process, bitwise."""
    base = lp_ooc_config.parent
    out = run(sluice_bin, "train", str(lp_ooc_config), "--set", f"run_dir={base / 'memory'}", "--set", "storage.mode=in_memory",
              "--set", "train.epochs=3")
    assert out.returncode == 0, out.stderr
    reference = lp_model(sluice_bin, base / "memory")
    out = run(sluice_bin, "train", str(lp_ooc_config), "--set", f"run_dir={base / 'memory-2'}", "--set", "storage.mode=in_memory")
    assert out.returncode == 0, out.stderr
    two_epochs = lp_model(sluice_bin, base / "memory-2")
    for n, cache, own in ((1, 700, "2.7k"), (2, 400, "1.3k"), (3, 250, "896")):
        sets = ("--set", f"storage.cache_rows={cache}")
        out = (run(sluice_bin, "train", str(lp_ooc_config), "--set", f"run_dir={base / 'ooc-1'}", *sets) if n == 1
               else launch(lp_ooc_config, n, base / f"ooc-{n}", *sets))
        assert out.returncode == 0, out.stderr
        assert f"row cache {cache} of this process's {own} rows" in out.stdout, out.stdout
        assert rows_written_back(out.stdout) > 0, out.stdout  # the cache evicted dirty rows
        if n > 1:
            assert_rows_travel_ahead(out.stdout)  # loaded run_ahead (1) steps ahead, sent one ahead
        assert lp_model(sluice_bin, base / f"ooc-{n}") == two_epochs, f"{n} processes out of core trained another model"
        if n == 3:  # a rank's table file stores its own rows only (the others are holes)
            f = os.stat(base / "ooc-3/rank-1/tables/nodes.bin")
            assert f.st_size == 2688 * 64 and f.st_blocks * 512 < f.st_size * 0.6, (f.st_size, f.st_blocks)
    # ComplEx corrupting both sides: head negatives among the uses too.
    complex_sets = ("--set", "model.decoder=complex", "--set", "model.reciprocal=false", "--set", "train.epochs=1")
    out = run(sluice_bin, "train", str(lp_ooc_config), "--set", f"run_dir={base / 'complex-memory'}",
              "--set", "storage.mode=in_memory", *complex_sets)
    assert out.returncode == 0, out.stderr
    out = launch(lp_ooc_config, 2, base / "complex-ooc", "--set", "storage.cache_rows=500", *complex_sets)
    assert out.returncode == 0, out.stderr
    assert rows_written_back(out.stdout) > 0, out.stdout
    assert lp_model(sluice_bin, base / "complex-ooc") == lp_model(sluice_bin, base / "complex-memory")
    split = base / "ooc-split"
    stop_two_ranks(sluice_bin, lp_ooc_config, split, 40, "--set", "storage.cache_rows=400")
    assert (split / "checkpoints/latest").read_text().strip() == "epoch-0-step-40"
    out = launch(lp_ooc_config, 3, split, "--resume", "--set", "storage.cache_rows=250")
    assert out.returncode == 0, out.stderr
    out = run(sluice_bin, "train", str(lp_ooc_config), "--set", f"run_dir={split}", "--set", "storage.mode=in_memory",
              "--set", "train.epochs=3", "--resume")
    assert out.returncode == 0, out.stderr
    ours = lp_model(sluice_bin, split)
    for key in ("nodes", "relations", "optimizer tensors", "test"):
        assert ours[key] == reference[key], key


def a_rank_whose_disk_fills_is_named(sluice_bin, config, run_dir, writes: int, *sets) -> None:
    """Rank 1's table file refuses its write-backs (ENOSPC from its `writes`th write on): it names
    the file and the error, rank 0 names rank 1, both exit non-zero."""
    port = free_port()
    fault = {"SLUICE_FAULT": f"write:enospc:tables/nodes.bin:{writes}:all"}
    procs = [subprocess.Popen([str(sluice_bin), "train", str(config), "--set", f"run_dir={run_dir}", *sets,
                               "--world-size", "2", "--rank", str(r), "--master", f"127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, **(fault if r == 1 else {})))
             for r in (0, 1)]
    (rc0, _, err0), (rc1, _, err1) = finish(procs, timeout=120)
    assert rc0 != 0 and "rank 1 did not exchange the step's rows" in err0, err0
    last = err1.strip().splitlines()[-1]
    assert rc1 != 0 and last.startswith("sluice: error: write ") and "rank-1/tables/nodes.bin" in last and "No space left on device" in last, err1


def test_link_prediction_out_of_core_a_rank_whose_disk_fills_is_named(sluice_bin, lp_ooc_config, gloo):
    a_rank_whose_disk_fills_is_named(sluice_bin, lp_ooc_config, lp_ooc_config.parent / "ooc-full", 200,
                                     "--set", "storage.cache_rows=400")


def test_node_classification_learnable_embeddings_a_rank_whose_disk_fills_is_named(sluice_bin, nc_config, gloo):
    a_rank_whose_disk_fills_is_named(sluice_bin, nc_config, nc_config.parent / "emb-full", 20, *NC_EMB,
                                     "--set", "storage.cache_rows=500")


@pytest.mark.parametrize("sets,says", [
    (["train.schedule=partitions"], "train.virtual_shards with train.schedule: partitions: the partition buffer's schedule trains in one process"),
    (["train.scoring=all"], "train.virtual_shards with train.scoring: all: 1vsAll scores every node in every shard"),
    (["train.scoring=auto"], "train.virtual_shards with train.scoring: auto (all for this graph): 1vsAll scores"),
    (["model.encoder=graphsage"], "train.virtual_shards with model.encoder: not sharded yet"),
    (["device.type=emulated"], "train.virtual_shards with device.type emulated: training in virtual shards runs on the CPU only so far"),
    (["train.virtual_shards=121"], "train.virtual_shards is 121, more than the 120 edges of a batch"),
])
def test_link_prediction_settings_that_cannot_shard_are_one_line(sluice_bin, lp_config, gloo, sets, says):
    out = run(sluice_bin, "train", str(lp_config), "--set", f"run_dir={lp_config.parent / 'lp-bad'}",
              *[a for s in sets for a in ("--set", s)])
    assert out.returncode != 0 and says in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_rank_that_cannot_write_its_shard_is_named_and_the_checkpoint_is_not_committed(sluice_bin, lp_config, gloo):
    """Rank 1's disk is full when it writes its shard of the epoch-2 checkpoint: rank 0 names it, no
    epoch-2 checkpoint exists (epoch 1's stays latest), and resuming trains one process's model."""
    base = lp_config.parent
    run_dir, port = base / "lp-full-disk", free_port()
    full = {"SLUICE_FAULT": "write:enospc:epoch-2-step-0.tmp/nodes.bin.shard-1-of-2:0:all"}
    procs = [subprocess.Popen([str(sluice_bin), "train", str(lp_config), "--set", f"run_dir={run_dir}",
                               "--world-size", "2", "--rank", str(r), "--master", f"127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, **(full if r == 1 else {}))) for r in (0, 1)]
    (rc0, _, err0), (rc1, _, err1) = finish(procs, timeout=120)
    assert rc0 != 0 and "rank 1 could not write its rows into the checkpoint" in err0, err0
    assert "checkpoint epoch-2-step-0 not written; the earlier checkpoints are intact" in err0, err0
    assert rc1 != 0 and "nodes.bin.shard-1-of-2" in err1 and "No space left on device" in err1, err1
    assert len(err0.strip().splitlines()) == 1 and len(err1.strip().splitlines()) == 1, (err0, err1)
    assert (run_dir / "checkpoints/latest").read_text().strip() == "epoch-1-step-0"
    assert not any(p.name.startswith("epoch-2") for p in (run_dir / "checkpoints").iterdir())
    out = launch(lp_config, 2, run_dir, "--resume")
    assert out.returncode == 0, out.stderr
    reference = base / "lp-full-disk-ref"
    assert run(sluice_bin, "train", str(lp_config), "--set", f"run_dir={reference}").returncode == 0
    ours, theirs = lp_model(sluice_bin, run_dir), lp_model(sluice_bin, reference)
    for key in ("nodes", "relations", "optimizer tensors", "test"):
        assert ours[key] == theirs[key], key
