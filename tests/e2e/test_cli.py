"""End-to-end checks of the sluice executable: help, version, the storage demo, config errors
and dataset errors each give one clear line and a non-zero exit."""
import json
import pathlib
import zlib

import numpy as np
import pytest

from conftest import ROOT, run


def one_error_line(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("sluice: error: "), lines[0]
    return lines[0]


def test_help_lists_subcommands(sluice_bin):
    proc = run(sluice_bin, "--help")
    assert proc.returncode == 0
    for sub in ("version", "info", "demo-storage"):
        assert sub in proc.stdout


def test_version_reports_torch_blas_and_threads(sluice_bin):
    proc = run(sluice_bin, "version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("sluice ")
    assert "libtorch" in proc.stdout
    assert "OpenBLAS" in proc.stdout, "install libopenblas0-pthread: reference BLAS is ~30x slower"
    assert "threads:" in proc.stdout


def test_storage_demo_checks_every_row(sluice_bin, tmp_path):
    proc = run(sluice_bin, "demo-storage", "--set", "demo.rows=20000", "--set", "demo.steps=3",
               "--set", f"demo.dir={tmp_path}/demo")
    assert proc.returncode == 0, proc.stderr
    assert "every row read back matched" in proc.stdout
    assert (tmp_path / "demo/table.rows").stat().st_size == (20000 * 200 + 4095) // 4096 * 4096


def test_print_config_round_trips(sluice_bin, tmp_path):
    proc = run(sluice_bin, "demo-storage", "--print-config", "--set", "io.queue_depth=7")
    assert proc.returncode == 0, proc.stderr
    assert "queue_depth: 7" in proc.stdout
    config = tmp_path / "effective.yaml"
    config.write_text(proc.stdout)
    again = run(sluice_bin, "demo-storage", str(config), "--print-config")
    assert again.stdout == proc.stdout


def test_config_errors_name_key_file_and_line(sluice_bin, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("io:\n  queue_depth: 32\n  qeue_depth: 4\n")
    proc = run(sluice_bin, "demo-storage", str(config))
    assert proc.returncode != 0
    assert one_error_line(proc) == f"sluice: error: {config}:3: unknown key 'io.qeue_depth'"
    config.write_text("io:\n  backend: spdk\n")
    proc = run(sluice_bin, "demo-storage", str(config))
    assert "io.backend: must be one of auto, uring, pread, got 'spdk'" in one_error_line(proc)
    proc = run(sluice_bin, "demo-storage", str(tmp_path / "missing.yaml"))
    assert "No such file or directory" in one_error_line(proc)


def write_dataset(root: pathlib.Path) -> pathlib.Path:
    """Writes a tiny link-prediction dataset exactly as docs/format.md describes, from Python."""
    ds = root / "tiny"
    (ds / "edges").mkdir(parents=True)
    arrays = {
        "edges.train.src": ("edges/train_src.bin", np.array([0, 1, 2, 4, 6, 9], np.int32)),
        "edges.train.dst": ("edges/train_dst.bin", np.array([1, 3, 7, 8, 2, 9], np.int32)),
        "edges.train.buckets": ("edges/train_buckets.bin", np.array([0, 2, 4, 5, 6], np.int64)),
    }
    files = {}
    for role, (path, array) in arrays.items():
        data = array.tobytes()
        (ds / path).write_bytes(data)
        files[role] = {"path": path, "dtype": str(array.dtype), "shape": list(array.shape),
                       "bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    manifest = {
        "format": "sluice-dataset", "format_version": 1, "task": "link_prediction",
        "name": "tiny", "counts": {"nodes": 10, "relations": 1, "edges": {"train": 6}},
        "partitions": {"count": 2, "bounds": [0, 5, 10]}, "files": files,
        "stats": {"max_out_degree": 1},
    }
    (ds / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return ds


def test_info_reads_a_dataset_written_by_python(sluice_bin, tmp_path):
    ds = write_dataset(tmp_path)
    proc = run(sluice_bin, "info", str(ds), "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "edges.train: 6" in proc.stdout
    assert "checksums: all 3 files verified" in proc.stdout


def test_info_reports_corruption_in_one_line(sluice_bin, tmp_path):
    ds = write_dataset(tmp_path)
    data = bytearray((ds / "edges/train_dst.bin").read_bytes())
    data[0] ^= 0xFF
    (ds / "edges/train_dst.bin").write_bytes(bytes(data))
    assert run(sluice_bin, "info", str(ds)).returncode == 0  # sizes are fine
    proc = run(sluice_bin, "info", str(ds), "--verify")
    assert proc.returncode != 0
    assert "edges/train_dst.bin: checksum mismatch" in one_error_line(proc)

    (ds / "edges/train_src.bin").write_bytes(b"\0" * 8)
    proc = run(sluice_bin, "info", str(ds))
    assert "is 8 bytes, the manifest says 24 (truncated)" in one_error_line(proc)

    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["format_version"] = 99
    (ds / "manifest.json").write_text(json.dumps(manifest))
    proc = run(sluice_bin, "info", str(ds))
    assert "dataset format version 99" in one_error_line(proc)


def test_info_on_a_directory_that_is_not_a_dataset(sluice_bin, tmp_path):
    proc = run(sluice_bin, "info", str(tmp_path))
    assert proc.returncode != 0
    assert "not a sluice dataset?" in one_error_line(proc)


def test_command_line_errors_are_one_line_like_every_other_error(sluice_bin):
    proc = run(sluice_bin, "trian", "x.yaml")
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert "unknown command 'trian'" in line and "did you mean 'train'?" in line, line
    proc = run(sluice_bin, "train", "x.yaml", "--bogus")
    assert proc.returncode == 2
    assert "--bogus" in one_error_line(proc)
    proc = run(sluice_bin, "eval")
    assert proc.returncode == 2
    assert "RUN_DIR" in one_error_line(proc)
    proc = run(sluice_bin)
    assert proc.returncode == 2
    one_error_line(proc)


def test_eval_of_a_directory_that_is_no_run_is_one_line(sluice_bin, tmp_path):
    proc = run(sluice_bin, "eval", str(tmp_path))
    assert proc.returncode != 0
    assert "not a run directory (no config.yaml)" in one_error_line(proc)


@pytest.mark.parametrize("config", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_shipped_config_loads(sluice_bin, config):
    """Each configs/*.yaml is valid for this build: known keys, values in range (its dataset
    need not exist)."""
    command = "demo-storage" if config == "storage_demo.yaml" else "train"
    proc = run(sluice_bin, command, str(ROOT / "configs" / config), "--print-config")
    assert proc.returncode == 0, proc.stderr
