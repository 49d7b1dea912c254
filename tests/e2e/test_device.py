"""The device path through the sluice CLI (device.type emulated everywhere; cuda where this build
has CUDA and sees a GPU, as scripts/gpu_check.sh runs it): recommendation and link prediction
out of core equal in memory bit for bit on the device, whatever the device row cache holds; the
device against the CPU within 1e-4 relative after 20 steps (per-step losses, tables, dense
parameters); the summary reports the device; bad device settings get one line."""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run

PREP = [sys.executable if "numpy" in sys.modules else "/usr/bin/python3", str(ROOT / "scripts/sluice_prep.py")]


def gpu_visible(sluice_bin: pathlib.Path) -> bool:
    out = run(sluice_bin, "version")
    assert out.returncode == 0, out.stderr
    return "GPU: none" not in out.stdout


@pytest.fixture(params=["emulated", "cuda"])
def device(request, sluice_bin) -> str:
    if request.param == "cuda" and not gpu_visible(sluice_bin):
        pytest.skip("no GPU: this build has no CUDA or sees no device (see `sluice version`)")
    return request.param


def train(sluice_bin, cfg: pathlib.Path, *sets: str, stop_after: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if stop_after is not None:
        env["SLUICE_STOP_AFTER_STEPS"] = str(stop_after)
    args = [str(sluice_bin), "train", str(cfg)]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    # Stopped after `stop_after` steps as if interrupted: 130, with a checkpoint of that step.
    assert out.returncode == (0 if stop_after is None else 130), out.stderr
    return out


def step_losses(run_dir: pathlib.Path) -> np.ndarray:
    rows = [l.split("\t") for l in (run_dir / "steps.tsv").read_text().splitlines()[1:]]
    assert all(int(r[3]) > 0 for r in rows), "a step was logged without its units"
    return np.array([float(r[4]) for r in rows])


def latest(run_dir: pathlib.Path) -> pathlib.Path:
    return run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)))) if a.size else 0.0


def dense_params(path: pathlib.Path) -> dict[str, np.ndarray]:
    torch = pytest.importorskip("torch")
    module = torch.jit.load(str(path), map_location="cpu")
    return {n: p.detach().numpy() for n, p in module.named_parameters()}


def device_line(stdout: str) -> str:
    lines = [l for l in stdout.splitlines() if l.strip().startswith("device:")]
    assert lines, "the summary has no device line:\n" + stdout
    return lines[0]


# Recommendation --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clicks(tmp_path_factory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("dev-rec")
    out = subprocess.run(PREP + ["gen-clicks", "--samples", "24000", "--sparse", "6", "--dense", "3",
                                 "--vocab", "6000", "--seed", "4", "--out", str(d / "ds")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return d / "ds"


def dlrm_config(path: pathlib.Path, dataset: pathlib.Path, device: str) -> pathlib.Path:
    path.write_text("\n".join([
        "task: recommendation", f"dataset: {dataset}", f"run_dir: {path.parent / 'unused'}", "progress: false",
        "model: {dim: 8, bottom: [16], top: [16], ids: modulo, table_rows: 4096, linear: true}",
        "train: {epochs: 2, batch: 200, optimizer: rowwise_adagrad, lr: 0.05, adagrad_init: 1.0e-4, seed: 3}",
        "eval: {every: 1}",
        "storage: {mode: out_of_core, cache_rows: 5000, window: 2, run_ahead: 2}",
        f"device: {{type: {device}}}"]) + "\n")
    return path


def test_dlrm_out_of_core_equals_in_memory_on_device(sluice_bin, clicks, tmp_path, device):
    cfg = dlrm_config(tmp_path / "c.yaml", clicks, device)
    runs = {"mem": ["storage.mode=in_memory"],
            "ooc": [],  # the device holds the two steps in flight only
            "ooc-cached": ["device.gpu_budget=16MiB"],  # every row fits on the device
            "ooc-evicting": ["device.gpu_budget=1MiB"],  # about 11K of 24K rows: the cache evicts
            # the same slots, the oracle looking at the next steps the sampler has filled
            "ooc-oracle": ["device.gpu_budget=1MiB", "device.planner=oracle"]}
    out, tables, dense, metrics = {}, {}, {}, {}
    for name, sets in runs.items():
        r = tmp_path / name
        out[name] = train(sluice_bin, cfg, f"run_dir={r}", *sets).stdout
        ex = run(sluice_bin, "export", str(r), "--out", str(r / "export"))
        assert ex.returncode == 0, ex.stderr
        tables[name] = [p.read_bytes() for p in sorted((r / "export").glob("table_*.npy"))]
        dense[name] = (latest(r) / "dense.pt").read_bytes()
        metrics[name] = [json.loads(l)["test"] for l in (r / "metrics.jsonl").read_text().splitlines()]
    cache = [l for l in out["ooc"].splitlines() if "cache:" in l][0]
    assert "write-backs 0" not in cache, f"no row was ever evicted: {cache}"
    for name in ("ooc", "ooc-cached", "ooc-evicting", "ooc-oracle"):
        assert tables[name] == tables["mem"], f"{name}: tables differ from in memory"
        assert dense[name] == dense["mem"], f"{name}: dense parameters differ from in memory"
        assert metrics[name] == metrics["mem"]
    # The device cache changed what was copied, not what was trained.
    copied = {n: int(device_line(out[n]).split(" of ")[2].split()[-1])
              for n in ("ooc", "ooc-cached", "ooc-evicting", "ooc-oracle")}
    assert copied["ooc-cached"] < copied["ooc-evicting"] < copied["ooc"], copied
    # Skewed ids: keeping the rows the next steps use, then the most used, copies fewer than lru.
    assert copied["ooc-oracle"] < copied["ooc-evicting"], copied
    ahead = float(re.search(r"oracle looking ([\d.]+) steps ahead", device_line(out["ooc-oracle"])).group(1))
    assert ahead > 0, device_line(out["ooc-oracle"])  # the window held later steps, not just the staged one
    # With room to spare the device cache is planned in shards on the host's cores
    # (cache/sharded_row_cache.h); two steps' rows and no more (gpu_budget 0) is one cache.
    shards = {n: int(re.search(r"device cache \d+ rows in (\d+) shards", device_line(out[n])).group(1))
              for n in ("ooc", "ooc-cached", "ooc-evicting", "ooc-oracle")}
    assert shards["ooc"] == 1, shards
    if (os.cpu_count() or 1) > 1:
        assert shards["ooc-cached"] > 1 and shards["ooc-evicting"] > 1 and shards["ooc-oracle"] > 1, shards


def test_dlrm_device_matches_cpu(sluice_bin, clicks, tmp_path, device):
    cfg = dlrm_config(tmp_path / "c.yaml", clicks, device)
    for name, dev in (("cpu", "cpu"), ("dev", device)):
        train(sluice_bin, cfg, f"run_dir={tmp_path / name}", f"device.type={dev}", "step_log=true",
              "train.epochs=1", stop_after=20)
    losses = {n: step_losses(tmp_path / n) for n in ("cpu", "dev")}
    assert len(losses["cpu"]) == 20 and relative_gap(losses["dev"], losses["cpu"]) < 1e-4
    rows = {}
    for n in ("cpu", "dev"):
        ex = run(sluice_bin, "export", str(tmp_path / n), "--out", str(tmp_path / n / "export"))
        assert ex.returncode == 0, ex.stderr
        rows[n] = np.concatenate([np.load(p).ravel() for p in sorted((tmp_path / n / "export").glob("table_*.npy"))])
    assert relative_gap(rows["dev"], rows["cpu"]) < 1e-4
    a, b = dense_params(latest(tmp_path / "dev") / "dense.pt"), dense_params(latest(tmp_path / "cpu") / "dense.pt")
    assert a.keys() == b.keys() and a
    for k in a:
        assert relative_gap(a[k], b[k]) < 1e-4, k


# Link prediction -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> pathlib.Path:
    """A power-law graph with 3 relations in 16 partitions."""
    d = tmp_path_factory.mktemp("dev-lp")
    rng = np.random.default_rng(5)
    n, m = 3000, 40000
    src = rng.integers(0, n, m)
    dst = np.minimum((n * rng.random(m) ** 3).astype(np.int64), n - 1)
    rel = rng.integers(0, 3, m)
    (d / "g.tsv").write_text("\n".join(f"{a}\t{r}\t{b}" for a, r, b in zip(src, rel, dst)) + "\n")
    out = subprocess.run(PREP + ["edges", str(d / "g.tsv"), "--out", str(d / "ds"), "--partitions", "16",
                                 "--src-col", "0", "--rel-col", "1", "--dst-col", "2", "--valid-frac", "0.02",
                                 "--test-frac", "0.02"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return d / "ds"


def lp_config(path: pathlib.Path, dataset: pathlib.Path, device: str) -> pathlib.Path:
    path.write_text("\n".join([
        f"dataset: {dataset}", f"run_dir: {path.parent / 'unused'}", "progress: false",
        "model: {decoder: distmult, dim: 16}",
        "train: {epochs: 1, batch: 500, chunks: 4, negatives: 50, seed: 3}",
        "eval: {every: 0}",
        "storage: {mode: out_of_core, resident: 4, slots: 5, run_ahead: 3}",
        f"device: {{type: {device}}}"]) + "\n")
    return path


def test_lp_out_of_core_equals_in_memory_on_device(sluice_bin, graph, tmp_path, device):
    cfg = lp_config(tmp_path / "c.yaml", graph, device)
    out, nodes, rels = {}, {}, {}
    for name, sets in {"mem": ["storage.mode=in_memory"], "ooc": [],
                       "ooc-cached": ["device.gpu_budget=16MiB"],
                       "ooc-oracle": ["device.gpu_budget=16MiB", "device.planner=oracle"]}.items():
        r = tmp_path / name
        out[name] = train(sluice_bin, cfg, f"run_dir={r}", *sets).stdout
        nodes[name] = (r / "tables/nodes.bin").read_bytes()
        rels[name] = (latest(r) / "relations.pt").read_bytes()
    assert "4 of 16 partitions resident" in out["ooc"]
    loads = [l for l in out["ooc"].splitlines() if "partition loads" in l][0]
    assert "partition loads 0," not in loads, "the out-of-core run never swapped a partition"
    ahead = float(re.search(r"oracle looking ([\d.]+) steps ahead", device_line(out["ooc-oracle"])).group(1))
    # How far the sampler is ahead depends on timing; DeviceRowsTest counts the window exactly.
    assert ahead > 0, device_line(out["ooc-oracle"])  # the sampler's steps ahead joined the window
    for name in ("ooc", "ooc-cached", "ooc-oracle"):
        assert nodes[name] == nodes["mem"], f"{name}: node table differs from in memory"
        assert rels[name] == rels["mem"], f"{name}: relations differ from in memory"
    assert "busy" in device_line(out["ooc"])


def test_lp_device_matches_cpu(sluice_bin, graph, tmp_path, device):
    cfg = lp_config(tmp_path / "c.yaml", graph, device)
    for name, dev in (("cpu", "cpu"), ("dev", device)):
        train(sluice_bin, cfg, f"run_dir={tmp_path / name}", f"device.type={dev}", "step_log=true", stop_after=20)
    losses = {n: step_losses(tmp_path / n) for n in ("cpu", "dev")}
    assert len(losses["cpu"]) == 20 and relative_gap(losses["dev"], losses["cpu"]) < 1e-4
    exported = {}
    for n in ("cpu", "dev"):
        ex = run(sluice_bin, "export", str(tmp_path / n), "--out", str(tmp_path / n / "export"))
        assert ex.returncode == 0, ex.stderr
        exported[n] = {k: np.load(tmp_path / n / "export" / f"{k}.npy") for k in ("nodes", "relations")}
    for k in ("nodes", "relations"):
        assert relative_gap(exported["dev"][k], exported["cpu"][k]) < 1e-4, k
    # The CPU trains distmult through its fused path, the device through autograd: not the same bits.
    assert not np.array_equal(exported["dev"]["nodes"], exported["cpu"]["nodes"])


# Bad settings ----------------------------------------------------------------------------------

def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode != 0
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("sluice: error:"), out.stderr
    return lines[0]


def test_gpu_budget_too_small_is_one_line(sluice_bin, clicks, tmp_path):
    cfg = dlrm_config(tmp_path / "c.yaml", clicks, "emulated")
    out = run(sluice_bin, "train", str(cfg), "--set", f"run_dir={tmp_path / 'r'}", "--set", "device.gpu_budget=64KiB")
    assert "cannot hold two steps" in one_error_line(out)


def test_cuda_without_a_gpu_is_one_line(sluice_bin, clicks, tmp_path):
    if gpu_visible(sluice_bin):
        pytest.skip("this build sees a GPU")
    cfg = dlrm_config(tmp_path / "c.yaml", clicks, "cuda")
    line = one_error_line(run(sluice_bin, "train", str(cfg), "--set", f"run_dir={tmp_path / 'r'}"))
    assert "device.type: cuda" in line


def test_odd_float16_features_on_a_device_are_one_line(sluice_bin, tmp_path):
    ds = tmp_path / "nc"
    out = subprocess.run(PREP + ["gen-nc", "--nodes", "500", "--edges", "3000", "--features", "7",
                                 "--feature-dtype", "float16", "--classes", "3", "--out", str(ds)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg = tmp_path / "nc.yaml"
    cfg.write_text(f"task: node_classification\ndataset: {ds}\nrun_dir: {tmp_path / 'r'}\nprogress: false\n"
                   "model: {fanouts: [3, 3]}\ndevice: {type: emulated}\n")
    assert "float16 features of odd width (7)" in one_error_line(run(sluice_bin, "train", str(cfg)))


# Node classification ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nc_graph(tmp_path_factory) -> dict[str, pathlib.Path]:
    """20,000 nodes, 100,000 undirected edges (stored both ways); 16 features in float32 and in
    float16; 6,000 training nodes."""
    d = tmp_path_factory.mktemp("dev-nc")
    out = {}
    for dtype in ("float32", "float16"):
        r = subprocess.run(PREP + ["gen-nc", "--nodes", "20000", "--edges", "100000", "--undirected", "--features", "16",
                                   "--classes", "4", "--seed", "7", "--train-frac", "0.3", "--feature-dtype", dtype,
                                   "--out", str(d / dtype)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[dtype] = d / dtype
    return out


NC_MODELS = {
    "graphsage": "{kind: graphsage, layers: 2, hidden: 16, fanouts: [5, 5], dropout: 0.5}",
    "gat-float16-normalized": "{kind: gat, layers: 2, hidden: 4, heads: 2, fanouts: [4, 4], dropout: 0.3, "
                              "attention_dropout: 0.2}",
    "gcn-embeddings": "{kind: gcn, norm: layer, layers: 2, hidden: 16, fanouts: [4, 4], embedding_dim: 8}",
}


def nc_config(path: pathlib.Path, dataset: pathlib.Path, device: str, model: str, extra: str = "") -> pathlib.Path:
    path.write_text("\n".join([
        "task: node_classification", f"dataset: {dataset}", f"run_dir: {path.parent / 'unused'}", "progress: false",
        f"model: {model}", "train: {epochs: 2, batch: 64, lr: 0.01, seed: 3}",
        "eval: {every: 1, batch: 256}",  # every neighbour, layer by layer (on the device)
        # 5,000 of 20,000 rows: a step samples about 1,000, three steps are in flight
        "storage: {mode: out_of_core, cache_rows: 5000, window: 1, run_ahead: 1}",
        f"device: {{type: {device}}}", extra]) + "\n")
    return path


def nc_dataset(nc_graph, name: str) -> pathlib.Path:
    return nc_graph["float16" if "float16" in name else "float32"]


def nc_extra(name: str) -> str:
    return "features: {normalize: row}" if "normalized" in name else ""


@pytest.mark.parametrize("name", list(NC_MODELS))
def test_nc_out_of_core_equals_in_memory_on_device(sluice_bin, nc_graph, tmp_path, device, name):
    cfg = nc_config(tmp_path / "c.yaml", nc_dataset(nc_graph, name), device, NC_MODELS[name], nc_extra(name))
    out, dense, metrics, rows = {}, {}, {}, {}
    for run_name, sets in {"mem": ["storage.mode=in_memory"], "ooc": [],
                           "ooc-cached": ["device.gpu_budget=64MiB"],
                           # the hubs stay on the device, the rest pass through
                           "ooc-static": ["device.gpu_budget=2400KiB", "device.planner=static"],
                           "ooc-oracle": ["device.gpu_budget=2400KiB", "device.planner=oracle"]}.items():
        r = tmp_path / run_name
        out[run_name] = train(sluice_bin, cfg, f"run_dir={r}", *sets).stdout
        dense[run_name] = (latest(r) / "dense.pt").read_bytes()
        metrics[run_name] = [json.loads(l).get("valid") for l in (r / "metrics.jsonl").read_text().splitlines()]
        if "embeddings" in name:
            rows[run_name] = (latest(r) / "nodes.bin").read_bytes()
    summary = json.loads((tmp_path / "ooc/summary.json").read_text())
    assert summary["cache"]["rows_loaded"] > 1.5 * 20000, summary["cache"]  # rows were evicted and read again
    for run_name in ("ooc", "ooc-cached", "ooc-static", "ooc-oracle"):
        assert dense[run_name] == dense["mem"], f"{run_name}: dense parameters differ from in memory"
        assert metrics[run_name] == metrics["mem"], run_name
        if rows:
            assert rows[run_name] == rows["mem"], f"{run_name}: embeddings differ from in memory"
    if name == "graphsage":  # 4 classes: it learned
        assert metrics["mem"][-1]["accuracy"] > 0.4, metrics["mem"]
    # The device cache changed what was copied, not what was trained.
    copied = {n: int(device_line(out[n]).split(" of ")[2].split()[-1])
              for n in ("ooc", "ooc-cached", "ooc-static", "ooc-oracle")}
    assert copied["ooc-cached"] < copied["ooc"] / 2, copied
    assert copied["ooc-static"] < copied["ooc"], copied
    assert copied["ooc-oracle"] < copied["ooc"], copied
    ahead = float(re.search(r"oracle looking ([\d.]+) steps ahead", device_line(out["ooc-oracle"])).group(1))
    assert ahead > 0, device_line(out["ooc-oracle"])


def test_static_device_planner_is_for_node_classification(sluice_bin, clicks, tmp_path):
    cfg = dlrm_config(tmp_path / "c.yaml", clicks, "emulated")
    out = run(sluice_bin, "train", str(cfg), "--set", f"run_dir={tmp_path / 'r'}", "--set", "device.gpu_budget=16MiB",
              "--set", "device.planner=static")
    assert "device.planner: static" in one_error_line(out)


@pytest.mark.parametrize("name", list(NC_MODELS))
def test_nc_device_matches_cpu(sluice_bin, nc_graph, tmp_path, device, name):
    cfg = nc_config(tmp_path / "c.yaml", nc_dataset(nc_graph, name), device, NC_MODELS[name], nc_extra(name))
    for run_name, dev in (("cpu", "cpu"), ("dev", device)):
        train(sluice_bin, cfg, f"run_dir={tmp_path / run_name}", f"device.type={dev}", "step_log=true",
              "train.epochs=1", stop_after=20)
    losses = {n: step_losses(tmp_path / n) for n in ("cpu", "dev")}
    assert len(losses["cpu"]) == 20 and relative_gap(losses["dev"], losses["cpu"]) < 1e-4
    a, b = dense_params(latest(tmp_path / "dev") / "dense.pt"), dense_params(latest(tmp_path / "cpu") / "dense.pt")
    assert a.keys() == b.keys() and a
    for k in a:
        assert relative_gap(a[k], b[k]) < 1e-4, k
    if "embeddings" in name:
        rows = {n: np.fromfile(latest(tmp_path / n) / "nodes.bin", dtype=np.float32) for n in ("cpu", "dev")}
        assert relative_gap(rows["dev"], rows["cpu"]) < 1e-4
