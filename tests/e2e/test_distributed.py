"""Runs across processes (train/dist.h, docs/distributed.md): the place from flags or torchrun's
variables, the rendezvous through c10d's TCPStore with its timeout, and the ranks' agreement on
config and dataset. Data-parallel training is not built yet: agreeing ranks stop saying so."""
import os
import pathlib
import socket
import subprocess
import sys
import time

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


def test_a_build_without_gloo_refuses_in_one_line(sluice_bin, config, has_gloo):
    if has_gloo:
        pytest.skip("this sluice has Gloo process groups")
    out = run(sluice_bin, "version")
    assert "distributed: none: built without the Gloo headers" in out.stdout, out.stdout
    out = run(sluice_bin, "train", str(config), "--world-size", "2", "--rank", "0", "--master", "127.0.0.1:1")
    assert out.returncode != 0
    assert "built without Gloo process groups" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


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


def test_ranks_join_and_agree_then_stop_as_data_parallel_training_is_not_built(sluice_bin, config, gloo):
    port = free_port()
    results = finish([start(sluice_bin, config, r, 3, port) for r in (2, 0, 1)])
    for rc, out, err in results:
        assert rc != 0
        assert "joined at 127.0.0.1:" in out, (out, err)
        assert "3 ranks joined" in err and "agree on the config and the dataset" in err, err
        assert "not built yet" in err and len(err.strip().splitlines()) == 1, err


def test_torchrun_variables_place_the_processes(sluice_bin, config, gloo):
    port = str(free_port())
    procs = [start(sluice_bin, config, r, 2, 0, flags=False,
                   env={"WORLD_SIZE": "2", "RANK": str(r), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for r in (0, 1)]
    for rc, out, err in finish(procs):
        assert f"of 2 joined at 127.0.0.1:{port}" in out, (out, err)
        assert "agree on the config" in err, err


def test_a_config_mismatch_stops_every_rank_naming_the_key_and_ranks(sluice_bin, config, gloo):
    port = free_port()
    results = finish([start(sluice_bin, config, 0, 3, port), start(sluice_bin, config, 1, 3, port),
                      start(sluice_bin, config, 2, 3, port, "train.lr=0.05")])
    for rc, out, err in results:
        assert rc != 0
        assert "rank 2 differs from rank 0 in their config: train.lr is 0.05 on rank 2, 0.1 on rank 0" in err, err
        assert len(err.strip().splitlines()) == 1, err
    # Where a rank runs (its run directory, its storage) may differ: only the trajectory must not.
    results = finish([start(sluice_bin, config, 0, 2, port + 1, "storage.budget=1GiB"),
                      start(sluice_bin, config, 1, 2, port + 1, "storage.budget=2GiB", "threads.total=1")])
    for rc, out, err in results:
        assert "agree on the config" in err, err


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


def test_an_impossible_place_is_one_clear_line(sluice_bin, config):
    out = run(sluice_bin, "train", str(config), "--world-size", "2", "--rank", "2")
    assert out.returncode != 0
    assert "rank 2 (--rank) is outside a world of 2 (--world-size)" in out.stderr, out.stderr
    env = dict(os.environ, WORLD_SIZE="2")
    out = subprocess.run([str(sluice_bin), "train", str(config)], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "no rank" in out.stderr, out.stderr
