"""The library, as its users get it: `cmake --install` into a fresh prefix, every public header
compiled alone against that prefix, find_package(sluice) refusing another libtorch in one line,
and examples/dlrm_custom built from a copy outside the repository, trained out of core and in
memory (the two bitwise equal) and, with the built-in interaction re-implemented, bitwise equal
to `sluice train` of the same config."""
import pathlib
import shutil
import subprocess

import pytest

from conftest import ROOT

def sh(args, cwd=None, timeout=600):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def configure_and_build(src: pathlib.Path, prefix: pathlib.Path, *extra: str):
    out = sh(["cmake", "-S", src, "-B", src / "build", "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}", *extra])
    if out.returncode != 0:
        return out
    return sh(["cmake", "--build", src / "build"])


def build_example(name: str, prefix: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """examples/<name> copied out of the repository and built against the prefix: its binary."""
    src = tmp_path / name
    shutil.copytree(ROOT / "examples" / name, src)
    out = configure_and_build(src, prefix)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return src / "build" / name


def test_install_layout(prefix):
    for f in ["bin/sluice", "bin/sluice-prep", "include/sluice/sluice.h", "include/sluice/version.h",
              "lib/cmake/sluice/sluiceConfig.cmake", "lib/cmake/sluice/sluiceConfigVersion.cmake",
              "lib/libsluice_train.a", "share/sluice/sluice_prep.py"]:
        assert (prefix / f).exists(), f
    headers = {p.name for p in (prefix / "include").rglob("*")}
    assert not headers & {"runner.h", "task.h", "row_cache.h", "dataset.cc"}, "internal headers installed"
    assert sh([prefix / "bin/sluice", "--version"]).returncode == 0
    help_ = sh([prefix / "bin/sluice-prep", "--help"])
    assert help_.returncode == 0 and "gen-clicks" in help_.stdout


def test_every_public_header_compiles_alone(prefix, tmp_path):
    headers = sorted((prefix / "include/sluice").glob("*.h"))
    assert len(headers) >= 8
    src = tmp_path / "headers"
    src.mkdir()
    for h in headers:
        text = h.read_text()
        for internal in ('"common/', '"train/', '"storage/', '"cache/', '"prefetch/', '"sampler/'):
            assert internal not in text, f"{h.name} includes a repository path {internal}"
        (src / f"{h.stem}.cc").write_text(f"#include <sluice/{h.name}>\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.22)\nproject(headers CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
        "find_package(sluice 0.1 REQUIRED)\n"
        f"add_library(headers OBJECT {' '.join(h.stem + '.cc' for h in headers)})\n"
        "target_compile_options(headers PRIVATE -Wall -Wextra -Werror)\n"
        "target_link_libraries(headers PRIVATE sluice::sluice)\n")
    out = configure_and_build(src, prefix)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_find_package_refuses_another_libtorch(prefix, tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "TorchConfig.cmake").write_text("set(TORCH_FOUND TRUE)\n")
    (fake / "TorchConfigVersion.cmake").write_text(
        'set(PACKAGE_VERSION "9.9.0")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n')
    src = tmp_path / "consumer"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.22)\nproject(consumer CXX)\nfind_package(sluice REQUIRED)\n")
    out = sh(["cmake", "-S", src, "-B", src / "build", f"-DCMAKE_PREFIX_PATH={prefix}", f"-DTorch_DIR={fake}"])
    assert out.returncode != 0
    assert "sluice: built with libtorch" in out.stderr and "found libtorch 9.9.0" in out.stderr, out.stderr


CONFIG = """task: recommendation
dataset: {dataset}
run_dir: {run_dir}
progress: false
model: {{dim: 8, bottom: [16], top: [16], ids: modulo, table_rows: 4096, linear: true}}
train: {{epochs: 2, batch: 200, optimizer: rowwise_adagrad, lr: 0.05, adagrad_init: 1.0e-4, seed: 3}}
eval: {{every: 1}}
storage: {{mode: out_of_core, cache_rows: 5000, window: 2, run_ahead: 2}}
"""


def tables(export: pathlib.Path) -> dict[str, bytes]:
    found = {p.name: p.read_bytes() for p in sorted(export.glob("table_*.npy"))}
    assert found, f"no tables in {export}"
    return found


def test_dlrm_example_outside_the_repository(prefix, tmp_path):
    example = build_example("dlrm_custom", prefix, tmp_path)

    ds = tmp_path / "clicks"
    out = sh([prefix / "bin/sluice-prep", "gen-clicks", "--samples", "24000", "--sparse", "6", "--dense", "3",
              "--vocab", "6000", "--seed", "4", "--out", ds])
    assert out.returncode == 0, out.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.format(dataset=ds, run_dir=tmp_path / "builtin"))

    out = sh([prefix / "bin/sluice", "train", cfg])
    assert out.returncode == 0, out.stderr
    out = sh([prefix / "bin/sluice", "export", tmp_path / "builtin", "--out", tmp_path / "builtin-export"])
    assert out.returncode == 0, out.stderr
    builtin_eval = sh([prefix / "bin/sluice", "eval", tmp_path / "builtin", "--split", "test"]).stdout.split(" (checkpoint")[0]

    lines = {}
    for name, sets in {"dot": ["storage.mode=out_of_core"], "dot-mem": ["storage.mode=in_memory"],
                       "dcn": [], "dcn-mem": ["storage.mode=in_memory"]}.items():
        args = [example, "--model", name.split("-")[0], cfg, "--set", f"run_dir={tmp_path / name}",
                "--export", tmp_path / f"{name}-export"]
        for s in sets:
            args += ["--set", s]
        out = sh(args)
        assert out.returncode == 0, out.stderr
        lines[name] = out.stdout.strip().splitlines()[-1]
        assert lines[name].startswith("test AUC"), out.stdout
    # The built-in interaction, re-implemented: the same bits as sluice's own model.
    assert tables(tmp_path / "dot-export") == tables(tmp_path / "builtin-export")
    assert lines["dot"].split(" (model")[0] == builtin_eval
    # Out of core == in memory, for both models.
    assert tables(tmp_path / "dot-mem-export") == tables(tmp_path / "dot-export")
    assert tables(tmp_path / "dcn-mem-export") == tables(tmp_path / "dcn-export")
    assert lines["dcn"].split(" (model")[0] == lines["dcn-mem"].split(" (model")[0]
    assert tables(tmp_path / "dcn-export") != tables(tmp_path / "dot-export")

    # A run trained with a user's model resumes and opens only with that model.
    out = sh([example, "--model", "dcn", cfg, "--set", f"run_dir={tmp_path / 'dot'}", "--set", "train.epochs=3",
              "--resume"])
    assert out.returncode != 0 and "trained with the user's model 'dot', not the user's model 'dcn'" in out.stderr, \
        out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    out = sh([example, "--model", "dot", cfg, "--set", f"run_dir={tmp_path / 'dot'}", "--set", "train.epochs=3",
              "--resume"])
    assert out.returncode == 0, out.stderr


THROWING = r"""
#include <sluice/sluice.h>
#include <torch/torch.h>

#include <cstdio>
#include <stdexcept>
#include <string>

// A model whose loss throws once the run reaches step 3.
struct Flaky : sluice::Model {
  Flaky() { w = register_parameter("w", torch::zeros({1})); }
  torch::Tensor Predict(const sluice::ModelInput& in) override {
    return in.tables.at(0).uses.view({in.labels.size(0), -1}).sum(1) + w;
  }
  torch::Tensor Loss(const sluice::ModelInput& in) override {
    if (in.key.step == 3) throw std::runtime_error("user bug: tensor of the wrong shape");
    return torch::binary_cross_entropy_with_logits(Predict(in), in.labels);
  }
  uint64_t StepBytes() const override { return 1 << 20; }
  torch::Tensor w;
};

int main(int argc, char** argv) {
  const std::string config = argv[1], dir = argv[2];
  // 1. A factory that throws: a Status, no exception.
  auto run = sluice::Run::FromConfig(config, {"run_dir=" + dir + "/a"});
  if (!run.ok()) { std::printf("config: %s\n", run.status().message().c_str()); return 1; }
  sluice::Status s = run->SetModel("boom", [](const sluice::ModelSpec&) -> std::shared_ptr<sluice::Model> {
    throw std::invalid_argument("no model for these shapes");
  });
  if (s.ok()) s = run->Train();
  std::printf("factory: %s\n", s.message().c_str());
  // 2. A model that throws at step 3: a Status naming the step.
  auto run2 = sluice::Run::FromConfig(config, {"run_dir=" + dir + "/b"});
  if (!run2.ok()) return 1;
  s = run2->SetModel("flaky", [](const sluice::ModelSpec&) { return std::make_shared<Flaky>(); });
  if (s.ok()) s = run2->Train();
  std::printf("model: %s\n", s.message().c_str());
  // 3. Calls out of order: Status, not a crash.
  std::printf("again: %s\n", run2->Train().message().c_str());
  std::printf("set late: %s\n", run2->SetModel("x", [](const sluice::ModelSpec&) { return std::make_shared<Flaky>(); }).message().c_str());
  auto missing = sluice::Run::FromConfig(dir + "/absent.yaml");
  std::printf("missing: %s\n", missing.ok() ? "ok?" : missing.status().message().c_str());
  auto info = sluice::OpenDataset(dir + "/clicks", /*verify=*/true);
  std::printf("dataset: %s %llu\n", info.ok() ? info->task.c_str() : info.status().message().c_str(),
              info.ok() ? static_cast<unsigned long long>(info->sparse_features) : 0ULL);
  return 0;
}
"""


def test_user_exceptions_and_misuse_come_back_as_status(prefix, tmp_path):
    src = tmp_path / "throwing"
    src.mkdir()
    (src / "main.cc").write_text(THROWING)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.22)\nproject(throwing CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
        "find_package(sluice 0.1 REQUIRED)\nadd_executable(throwing main.cc)\n"
        "target_link_libraries(throwing PRIVATE sluice::sluice)\n")
    out = configure_and_build(src, prefix)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ds = tmp_path / "clicks"
    out = sh([prefix / "bin/sluice-prep", "gen-clicks", "--samples", "6000", "--sparse", "4", "--dense", "2",
              "--vocab", "500", "--seed", "2", "--out", ds])
    assert out.returncode == 0, out.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.format(dataset=ds, run_dir=tmp_path / "unused"))
    out = sh([src / "build/throwing", cfg, tmp_path])
    assert out.returncode == 0, out.stdout + out.stderr
    lines = dict(l.split(": ", 1) for l in out.stdout.strip().splitlines())
    assert "its factory failed: no model for these shapes" in lines["factory"], out.stdout
    assert "step 3" in lines["model"] and "user bug: tensor of the wrong shape" in lines["model"], out.stdout
    assert "has trained" in lines["again"], out.stdout
    assert "has started" in lines["set late"], out.stdout
    assert "absent.yaml" in lines["missing"], out.stdout
    assert lines["dataset"] == "recommendation 4", out.stdout


GNN_CONFIG = """task: node_classification
dataset: {dataset}
run_dir: {run_dir}
progress: false
model: {{kind: graphsage, layers: 2, hidden: 32, fanouts: [5, 5], dropout: 0.0}}
train: {{epochs: 3, batch: 32, lr: 0.01, seed: 3}}
eval: {{every: 1, fanouts: [5, 5], batch: 16}}
storage: {storage}
"""


def test_gnn_example_outside_the_repository(prefix, tmp_path):
    example = build_example("gnn_custom", prefix, tmp_path)
    ds = tmp_path / "graph"
    out = sh([prefix / "bin/sluice-prep", "gen-nc", "--nodes", "6000", "--edges", "60000", "--features", "32",
              "--classes", "5", "--seed", "5", "--out", ds])
    assert out.returncode == 0, out.stderr
    lines, preds = {}, {}
    # A cache of 2,000 feature rows of 6,000 out of core.
    for name, storage in {"ooc": "{mode: out_of_core, cache_rows: 2000, window: 1, run_ahead: 1}",
                          "mem": "{mode: in_memory}"}.items():
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(GNN_CONFIG.format(dataset=ds, run_dir=tmp_path / name, storage=storage))
        out = sh([example, cfg])
        assert out.returncode == 0, out.stderr
        lines[name] = out.stdout.strip().splitlines()[-1]
        latest = (tmp_path / name / "checkpoints/latest").read_text().strip()
        preds[name] = (tmp_path / name / "checkpoints" / latest / "dense.pt").read_bytes()
    assert lines["ooc"] == lines["mem"], lines
    assert preds["ooc"] == preds["mem"]
    accuracy = float(lines["ooc"].split("accuracy ")[1].split()[0])
    assert accuracy > 0.5, lines  # 5 planted classes: chance is 0.2

    # The built-in GNN behind the example's feature encoder (Run::SetEncoder): out of core ==
    # in memory, a model of its own, and a run that only the same encoder opens.
    for name, storage in {"enc-ooc": "{mode: out_of_core, cache_rows: 2000, window: 1, run_ahead: 1}",
                          "enc-mem": "{mode: in_memory}"}.items():
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(GNN_CONFIG.format(dataset=ds, run_dir=tmp_path / name, storage=storage))
        out = sh([example, cfg, "--encoder"])
        assert out.returncode == 0, out.stderr
        lines[name] = out.stdout.strip().splitlines()[-1]
        latest = (tmp_path / name / "checkpoints/latest").read_text().strip()
        preds[name] = (tmp_path / name / "checkpoints" / latest / "dense.pt").read_bytes()
    assert lines["enc-ooc"] == lines["enc-mem"] and preds["enc-ooc"] == preds["enc-mem"], lines
    assert "behind feature_mlp" in lines["enc-ooc"] and preds["enc-ooc"] != preds["ooc"]
    assert float(lines["enc-ooc"].split("accuracy ")[1].split()[0]) > 0.5, lines
    out = sh([prefix / "bin/sluice", "eval", tmp_path / "enc-ooc", "--split", "test"])
    assert out.returncode != 0 and out.stderr.count("\n") == 1, out.stderr
    assert "the built-in model behind the user's encoder 'feature_mlp', not the built-in model" in out.stderr


KG_CONFIG = """dataset: {dataset}
run_dir: {run_dir}
progress: false
model: {{dim: 32, init_scale: 0.1, reciprocal: {reciprocal}}}
train: {{epochs: 2, batch: 500, chunks: 5, negatives: 100, lr: 0.1, relation_optimizer: adagrad,
        relation_lr: 0.1, schedule: partitions, seed: 3}}
eval: {{every: 1}}
storage: {storage}
"""


def test_kg_example_outside_the_repository(prefix, tmp_path):
    example = build_example("kg_custom", prefix, tmp_path)
    edges = tmp_path / "edges.tsv"
    out = sh([prefix / "bin/sluice-prep", "gen-graph", "--nodes", "5000", "--edges", "60000", "--relations", "8",
              "--seed", "3", "--out", edges])
    assert out.returncode == 0, out.stderr
    ds = tmp_path / "kg"
    out = sh([prefix / "bin/sluice-prep", "edges", edges, "--rel-col", "2", "--valid-frac", "0.02",
              "--test-frac", "0.02", "--partitions", "4", "--out", ds])
    assert out.returncode == 0, out.stderr

    lines = {}
    # Out of core: 2 of 4 partitions resident; in memory: the same partition schedule.
    for name, storage, reciprocal in [
            ("ooc", "{mode: out_of_core, budget: 1GiB, resident: 2, slots: 3}", "false"),
            ("mem", "{mode: in_memory, resident: 2}", "false"),
            ("rec", "{mode: out_of_core, budget: 1GiB, resident: 2, slots: 3}", "true")]:
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(KG_CONFIG.format(dataset=ds, run_dir=tmp_path / name, storage=storage, reciprocal=reciprocal))
        out = sh([example, cfg, "--export", tmp_path / f"{name}-export"])
        assert out.returncode == 0, out.stderr
        lines[name] = out.stdout.strip().splitlines()[-1]
        assert lines[name].startswith("test MRR") and "filtered" in lines[name], out.stdout
    # Out of core == in memory: node rows, the model's relation phases, the test metrics.
    for f in ["nodes.npy", "dense.pt"]:
        assert (tmp_path / "ooc-export" / f).read_bytes() == (tmp_path / "mem-export" / f).read_bytes(), f
    assert lines["ooc"] == lines["mem"], lines
    assert (tmp_path / "rec-export/nodes.npy").read_bytes() != (tmp_path / "ooc-export/nodes.npy").read_bytes()
    assert not (tmp_path / "ooc-export/relations.npy").exists()  # the relations live in the model

    # The model learns the planted pattern (tails of relation k are the nodes of id k mod 8):
    # its MRR is well above a random ranking's (about 0.002 over 5,000 nodes).
    mrr = float(lines["ooc"].split("MRR ")[1].split()[0])
    assert mrr > 0.01, lines

    # The run opens only with the model it was trained with: `sluice eval` says so.
    out = sh([prefix / "bin/sluice", "eval", tmp_path / "ooc", "--split", "test"])
    assert out.returncode != 0 and "trained with the user's model 'rotate', not the built-in model" in out.stderr, \
        out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
