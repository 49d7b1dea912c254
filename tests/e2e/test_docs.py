"""The docs that can go stale: docs/configuration.md against the one the build generates from the
config structs, and every shell block of the tutorials, run in order against an installed prefix."""
import os
import pathlib
import re
import subprocess

import pytest

from conftest import BUILD, ROOT


def test_configuration_reference_matches_the_code():
    generated = BUILD / "docs/configuration.md"
    assert generated.exists(), f"{generated} missing: the build generates it (target config_reference)"
    committed = ROOT / "docs/configuration.md"
    assert committed.read_text() == generated.read_text(), (
        f"docs/configuration.md differs from the config structs: cp {generated} docs/configuration.md")
    text = committed.read_text()
    for key in ("`storage.budget`", "`model.decoder`", "`train.dense_optimizer`", "`model.fanouts`"):
        assert key in text, key


def shell_blocks(doc: pathlib.Path) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", doc.read_text(), flags=re.S)


@pytest.mark.parametrize("doc", ["tutorial_edge_list.md", "tutorial_custom_model.md"])
def test_tutorial_shell_blocks_run(doc, prefix, tmp_path):
    blocks = shell_blocks(ROOT / "docs" / doc)
    assert len(blocks) >= 3
    env = dict(os.environ, PATH=f"{prefix / 'bin'}:/usr/bin:{os.environ['PATH']}",
               SLUICE_PREFIX=str(prefix), SLUICE_SRC=str(ROOT))
    for i, block in enumerate(blocks):
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, f"{doc} block {i + 1} failed:\n{block}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return None
