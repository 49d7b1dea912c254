"""Shared pytest fixtures: where the sluice binary is."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# `sluice train` starts itself again with OMP_WAIT_POLICY=passive unless the environment names a
# policy (train/sluice_main.cc); naming it here runs the tests under the same policy without
# loading libtorch twice per run (test_run_lifecycle.py checks the restart itself).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


@pytest.fixture(scope="session")
def sluice_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("SLUICE_BIN", ROOT / "build/release/train/sluice"))
    if not path.exists():
        pytest.fail(f"sluice binary not found at {path}: build first (scripts/test.sh does)")
    return path


def run(binary: pathlib.Path, *args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


BUILD = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build/release"))


@pytest.fixture(scope="session")
def prefix(tmp_path_factory) -> pathlib.Path:
    """sluice installed (`cmake --install`) into a fresh prefix."""
    if not (BUILD / "CMakeCache.txt").exists():
        pytest.fail(f"no build at {BUILD}: build first (scripts/test.sh does)")
    p = tmp_path_factory.mktemp("prefix")
    out = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(p)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return p
