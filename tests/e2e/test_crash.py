"""Crash tests (slow: scripts/test.sh --full): SIGKILL at random times, 20 runs per workload.
Each run is killed once at a seeded random moment of an uninterrupted run's span (startup,
training, validation, a checkpoint write: wherever it lands), then `--resume`d to the end; its
final model (every checkpoint file and table, byte for byte) must equal the uninterrupted run's.
A table of where the kills landed is printed (pytest -s shows it)."""
import json
import pathlib
import random
import signal
import subprocess
import time

import pytest

from workloads import WORKLOADS, final_model, make_dataset, write_config

RUNS = 20
EPOCHS = 4


def train(sluice_bin, cfg: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(sluice_bin), "train", str(cfg), *extra], capture_output=True, text=True,
                          timeout=600)


def landed(run_dir: pathlib.Path) -> str:
    """Where a kill landed, from what the killed run left."""
    ckpts = run_dir / "checkpoints"
    if not (run_dir / "config.yaml").exists():
        return "startup"
    done = sorted(p.name for p in ckpts.glob("epoch-*") if not p.name.endswith(".tmp")) if ckpts.is_dir() else []
    temp = list(ckpts.glob("*.tmp")) if ckpts.is_dir() else []
    where = f"after {len(done)} checkpoint(s)"
    return where + (", inside a checkpoint write" if temp else "")


@pytest.mark.slow
@pytest.mark.parametrize("workload", WORKLOADS)
def test_sigkill_at_random_times_then_resume_equals_uninterrupted(sluice_bin, tmp_path_factory, workload):
    tmp = tmp_path_factory.mktemp(f"crash-{workload}")
    ds = make_dataset(workload, tmp / "data", "crash")
    whole = write_config(workload, tmp / "whole.yaml", ds, tmp / "whole", EPOCHS)
    start = time.monotonic()
    out = train(sluice_bin, whole)
    span = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    reference = final_model(tmp / "whole")
    rng = random.Random(f"crash-{workload}")
    outcomes = []
    for i in range(RUNS):
        run_dir = tmp / f"run{i}"
        cfg = write_config(workload, tmp / f"run{i}.yaml", ds, run_dir, EPOCHS)
        at = rng.uniform(0.02, 0.98) * span
        proc = subprocess.Popen([str(sluice_bin), "train", str(cfg)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(at)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
        assert killed or proc.returncode == 0, err
        where = landed(run_dir) if killed else "after the end"
        res = train(sluice_bin, cfg, "--resume")
        assert res.returncode == 0, f"run {i} (killed at {at:.2f} s, {where}): {res.stderr}"
        got = final_model(run_dir)
        assert got.keys() == reference.keys(), f"run {i}: {sorted(got)} vs {sorted(reference)}"
        differ = [k for k in reference if got[k] != reference[k]]
        assert not differ, f"run {i} (killed at {at:.2f} s, {where}): {differ} differ"
        assert not list((run_dir / "checkpoints").glob("*.tmp")), f"run {i} left a temporary checkpoint"
        outcomes.append((at, where))
    print(f"\n{workload}: uninterrupted {span:.2f} s; {RUNS} kills, every resumed model bitwise equal")
    for at, where in sorted(outcomes):
        print(f"  killed at {at:6.2f} s: {where}")
    summary = {w: sum(1 for _, x in outcomes if x == w) for w in sorted({x for _, x in outcomes})}
    print("  " + json.dumps(summary))
