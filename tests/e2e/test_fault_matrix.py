"""The fault matrix: whole training runs of every workload with one io fault injected
(SLUICE_FAULT, storage/fault_injection.h) into one place: the dataset's data files, the
manifest, the table files (reads and write-back), the checkpoint writes, RocksDB's writes; as
EIO, ENOSPC, a short transfer, a latency spike. Expected, per cell:
  - a failed read: one line `sluice: error:` naming the file and the offset, non-zero exit;
  - a failed write: one line naming the destination; the previous checkpoint stays intact and
    `--resume` afterwards ends bitwise equal to an uninterrupted run;
  - short io is finished inside the io layer and latency only slows: the run ends bitwise equal.
Every run has a 120 s timeout (a hang fails the cell). docs/hardening.md has the table.

Each cell first counts the io it targets in an unfaulted run (the report of a fault that never
fires), then faults the op in the middle, and checks the fault fired."""
import os
import pathlib
import shutil
import subprocess

import pytest

from workloads import final_model, make_dataset, write_config

EPOCHS = 2
TIMEOUT = 120
# (cell, op, where): where the fault lands, from the dataset and run directories.
CELLS = {
    "dataset read": ("read", lambda ds, run: str(ds) + "/" + DATA_FILE[ds.name.split("-")[0]]),
    "manifest read": ("read", lambda ds, run: str(ds / "manifest.json")),
    "table read": ("read", lambda ds, run: str(run / "tables") + "/"),
    "write-back": ("write", lambda ds, run: str(run / "tables") + "/"),
    "checkpoint write": ("write", lambda ds, run: str(run / "checkpoints") + "/"),
}
# The data file each workload reads while it trains (not only at open).
DATA_FILE = {"lp": "edges/", "rec": "samples/train", "nc": "nodes/"}
FAULTS = ("eio", "enospc", "short", "latency")
# (workload, storage backend): recommendation also with its tables in RocksDB.
SETUPS = [("lp", None), ("rec", "rowfile"), ("rec", "rocksdb"), ("nc", None)]


def cells_of(workload: str, backend: str | None):
    if backend == "rocksdb":
        return {"rocksdb write": ("write", lambda ds, run: str(run / "tables") + "/")}
    return CELLS


# Which of a cell's ops is faulted, as a fraction of them: the middle one, but for RocksDB (most
# of whose writes are its files' creation at open) one among the last checkpoint's.
WHEN = {"rocksdb write": 0.8}


def sluice(sluice_bin, cfg, *args, fault: str | None = None, report: pathlib.Path | None = None,
           backend: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SLUICE_FAULT", None)
    if fault:
        env["SLUICE_FAULT"] = fault
        env["SLUICE_FAULT_REPORT"] = str(report)
    sets = ["--set", f"storage.backend={backend}"] if backend else []
    return subprocess.run([str(sluice_bin), "train", str(cfg), *sets, *args], capture_output=True, text=True,
                          env=env, timeout=TIMEOUT)


def model_of(sluice_bin, run_dir: pathlib.Path, backend: str | None) -> dict[str, bytes]:
    if backend != "rocksdb":
        return final_model(run_dir)
    # RocksDB's files carry session ids: compare what the tables hold, and the dense model.
    out = subprocess.run([str(sluice_bin), "export", str(run_dir), "--out", str(run_dir / "export")],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    model = {p.name: p.read_bytes() for p in sorted((run_dir / "export").glob("*.npy"))}
    shutil.rmtree(run_dir / "export")
    ckpt = run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()
    model["dense.pt"] = (ckpt / "dense.pt").read_bytes()
    return model


def read_report(path: pathlib.Path) -> tuple[int, int]:
    fired, seen = path.read_text().split()
    return int(fired), int(seen)


def one_line_error(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0, "the fault was not reported"
    assert len(lines) == 1 and lines[0].startswith("sluice: error: "), out.stderr
    assert "Traceback" not in out.stderr and "terminate called" not in out.stderr, out.stderr
    return lines[0]


@pytest.mark.parametrize("workload,backend", SETUPS, ids=[f"{w}-{b}" if b else w for w, b in SETUPS])
def test_fault_matrix(sluice_bin, tmp_path_factory, workload, backend):
    tmp = tmp_path_factory.mktemp(f"faults-{workload}")
    ds = make_dataset(workload, tmp_path_factory.getbasetemp() / "fault-data")
    cfg = lambda run: write_config(workload, tmp / f"{run.name}.yaml", ds, run, EPOCHS)  # noqa: E731
    whole = tmp / "whole"
    out = sluice(sluice_bin, cfg(whole), backend=backend)
    assert out.returncode == 0, out.stderr
    reference = model_of(sluice_bin, whole, backend)
    table = []
    for cell, (op, where) in cells_of(workload, backend).items():
        # Count the ops the cell targets (a fault that never fires), then fault the middle one.
        probe = tmp / "probe"
        shutil.rmtree(probe, ignore_errors=True)
        target = where(ds, probe)
        report = tmp / "report"
        out = sluice(sluice_bin, cfg(probe), fault=f"{op}:latency:{target}:{10**12}", report=report, backend=backend)
        assert out.returncode == 0, out.stderr
        _, seen = read_report(report)
        assert seen > 0, f"{cell}: no {op} of {target} in a whole run"
        for fault in FAULTS:
            run_dir = tmp / f"{cell.replace(' ', '-')}-{fault}"
            target = where(ds, run_dir)
            first = int(seen * WHEN.get(cell, 0.5))
            times = 10 if fault == "latency" else 1
            if fault == "short":
                times = "all"  # every op that can be split is
            report.unlink(missing_ok=True)
            spec = f"{op}:{fault}:{target}:{first}:{times}"
            out = sluice(sluice_bin, cfg(run_dir), fault=spec, report=report, backend=backend)
            fired, _ = read_report(report)
            outcome = check_cell(sluice_bin, cfg(run_dir), out, op, fault, fired, target, run_dir, backend,
                                 reference, f"{cell} x {fault} ({spec})")
            table.append((cell, fault, outcome))
    print(f"\n{workload}{'-' + backend if backend else ''}:")
    for cell, fault, outcome in table:
        print(f"  {cell:17s} {fault:8s} {outcome}")


def check_cell(sluice_bin, cfg, out, op, fault, fired, target, run_dir, backend, reference, what) -> str:
    if fault in ("short", "latency"):
        assert out.returncode == 0, f"{what}: {out.stderr}"
        if fault == "latency":
            assert fired > 0, f"{what}: the fault never fired"
        assert model_of(sluice_bin, run_dir, backend) == reference, f"{what}: the model differs"
        return f"finished, bitwise equal ({fired} faulted ops)"
    assert fired == 1, f"{what}: {fired} faults fired"
    line = one_line_error(out)
    name = pathlib.Path(target.rstrip("/")).name
    assert name in line, f"{what}: the line does not name {name}: {line}"
    if op == "read":
        assert "offset" in line or "manifest" in line, f"{what}: no offset: {line}"
        return f"one line naming the file and offset: {line}"
    # A failed write: the earlier checkpoints are intact and a resume ends where a whole run does.
    res = sluice(sluice_bin, cfg, "--resume", backend=backend)
    assert res.returncode == 0, f"{what}: --resume after the failure: {res.stderr}"
    assert model_of(sluice_bin, run_dir, backend) == reference, f"{what}: resumed model differs"
    return f"--resume bitwise equal after one line naming the destination: {line}"
