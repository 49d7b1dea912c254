"""The run lifecycle every task shares (train/runner.h), checked on link prediction and DLRM
alike: the resume rule, a used or busy run directory, the retention rule and the checkpoint
each command opens, Ctrl-C and SIGTERM, checksummed checkpoints, summary.json, and the bugs the
two trainers' separate copies of this code had."""
import fcntl
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run

PREP = [sys.executable if "numpy" in sys.modules else "/usr/bin/python3", str(ROOT / "scripts/sluice_prep.py")]
TASKS = ["lp", "dlrm"]


def prep(*args):
    out = subprocess.run(PREP + [str(a) for a in args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict:
    """Per task: a small dataset and another one of the same shape (another manifest)."""
    d = tmp_path_factory.mktemp("life")
    rng = np.random.default_rng(9)
    n, m = 2000, 24000
    src, rel = rng.integers(0, n, m), rng.integers(0, 3, m)
    dst = np.minimum((n * rng.random(m) ** 3).astype(np.int64), n - 1)
    (d / "g.tsv").write_text("\n".join(f"{a}\t{r}\t{b}" for a, r, b in zip(src, rel, dst)) + "\n")
    for name, valid in (("lp", "0.02"), ("lp-other", "0.03")):
        prep("edges", d / "g.tsv", "--out", d / name, "--partitions", "8", "--src-col", "0",
             "--rel-col", "1", "--dst-col", "2", "--valid-frac", valid, "--test-frac", "0.02")
    for name, seed in (("dlrm", 4), ("dlrm-other", 5)):
        prep("gen-clicks", "--samples", "12000", "--sparse", "4", "--dense", "3", "--vocab", "3000",
             "--seed", seed, "--out", d / name)
    return {"lp": (d / "lp", d / "lp-other"), "dlrm": (d / "dlrm", d / "dlrm-other")}


def write_config(task: str, path: pathlib.Path, dataset: pathlib.Path, run_dir: pathlib.Path,
                 epochs: int = 2, every: int = 0, **storage) -> pathlib.Path:
    """A small out-of-core config of either task (the cache far smaller than the tables)."""
    if task == "lp":
        storage = {"mode": "out_of_core", "slots": 4, "resident": 3, "run_ahead": 2, **storage}
        lines = ["model: {decoder: distmult, dim: 16}",
                 f"train: {{epochs: {epochs}, batch: 500, chunks: 4, negatives: 50, seed: 3}}"]
    else:
        storage = {"mode": "out_of_core", "cache_rows": 3000, "window": 2, "run_ahead": 2, **storage}
        lines = ["task: recommendation",
                 "model: {dim: 8, bottom: [16], top: [16], ids: modulo, table_rows: 2048, linear: true}",
                 f"train: {{epochs: {epochs}, batch: 200, lr: 0.05, adagrad_init: 1.0e-4, seed: 3}}"]
    lines += [f"dataset: {dataset}", f"run_dir: {run_dir}", "progress: false", f"eval: {{every: {every}}}",
              "storage: {" + ", ".join(f"{k}: {v}" for k, v in storage.items()) + "}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def model_bytes(sluice_bin, task: str, run_dir: pathlib.Path) -> dict:
    """What must be equal for two runs to be the same model: the tables (exported) and the dense
    state of the latest checkpoint."""
    out = run_dir / "export-check"
    if not out.exists():
        ex = run(sluice_bin, "export", str(run_dir), "--out", str(out), "--checkpoint", "latest")
        assert ex.returncode == 0, ex.stderr
    files = {p.name: p.read_bytes() for p in sorted(out.glob("*.npy"))}
    latest = (run_dir / "checkpoints/latest").read_text().strip()
    dense = "relations.pt" if task == "lp" else "dense.pt"
    files[dense] = (run_dir / "checkpoints" / latest / dense).read_bytes()
    assert len(files) >= 2
    return files


def checkpoint_files(run_dir: pathlib.Path) -> dict:
    return {str(p.relative_to(run_dir)): p.read_bytes()
            for p in sorted((run_dir / "checkpoints").rglob("*")) if p.is_file()}


def one_line(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("task", TASKS)
def test_a_refused_resume_leaves_the_run_as_it_was(sluice_bin, datasets, tmp_path, task):
    """Another learning rate, seed or model shape, or another dataset of the same shape: one line
    naming the checkpoint, exit 2, config.yaml and every checkpoint file unchanged (DLRM used to
    overwrite config.yaml first, and resumed a changed lr or dataset without a word)."""
    ds, other = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r")
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    config, files = (tmp_path / "r/config.yaml").read_text(), checkpoint_files(tmp_path / "r")
    changes = [["train.lr=0.2"], ["train.seed=4"], ["model.dim=4"]]
    if task == "dlrm":
        changes += [["model.table_rows=1024"], ["train.optimizer=adagrad"]]
    for sets in changes:
        out = run(sluice_bin, "train", str(cfg), "--resume", *[a for s in sets for a in ("--set", s)])
        assert out.returncode == 2, (sets, out.stderr)
        line = one_line(out)
        assert "checkpoint of another config" in line and "checkpoints/epoch-2-step-0" in line, line
        key, value = sets[0].split("=")
        assert f"{key} {value} (the run's: " in line, line  # names what differs
        assert (tmp_path / "r/config.yaml").read_text() == config
        assert checkpoint_files(tmp_path / "r") == files
    out = run(sluice_bin, "train", str(cfg), "--resume", "--set", f"dataset={other}")
    assert out.returncode == 2 and "checkpoint of another dataset" in one_line(out)
    assert (tmp_path / "r/config.yaml").read_text() == config
    # What the rule leaves out resumes: more epochs, another budget or io depth, eval cadence.
    out = run(sluice_bin, "train", str(cfg), "--resume", "--set", "train.epochs=3", "--set",
              "io.queue_depth=8", "--set", "eval.every=1")
    assert out.returncode == 0, out.stderr
    assert "\n  epochs: 3\n" in (tmp_path / "r/config.yaml").read_text()


@pytest.mark.parametrize("task", TASKS)
def test_a_used_run_directory_needs_resume_or_overwrite(sluice_bin, datasets, tmp_path, task):
    """A fresh train into a run directory with checkpoints is refused; --overwrite discards the
    old checkpoints (a stale best included) and starts over."""
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r", every=1)
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    assert (tmp_path / "r/checkpoints/best").exists()
    out = run(sluice_bin, "train", str(cfg))
    assert out.returncode == 2
    line = one_line(out)
    assert "holds checkpoints of an earlier run" in line and "--resume" in line and "--overwrite" in line
    out = run(sluice_bin, "train", str(cfg), "--overwrite", "--set", "eval.every=0", "--set", "train.epochs=1")
    assert out.returncode == 0, out.stderr
    left = sorted(p.name for p in (tmp_path / "r/checkpoints").iterdir())
    assert left == ["epoch-1-step-0", "latest"], left
    assert (tmp_path / "r/metrics.jsonl").read_text().count("\n") == 1
    assert "(checkpoint epoch-1-step-0)" in run(sluice_bin, "eval", str(tmp_path / "r")).stdout
    both = run(sluice_bin, "train", str(cfg), "--resume", "--overwrite")
    assert both.returncode == 2 and "exclude each other" in one_line(both)


@pytest.mark.parametrize("task", TASKS)
def test_a_second_trainer_is_refused(sluice_bin, datasets, tmp_path, task):
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r")
    (tmp_path / "r").mkdir()
    with open(tmp_path / "r/lock", "w") as held:  # another trainer holds the run directory
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        out = run(sluice_bin, "train", str(cfg))
        assert out.returncode == 1
        assert "is in use by another sluice train (pid 4242)" in one_line(out)
        assert not (tmp_path / "r/config.yaml").exists()
    assert run(sluice_bin, "train", str(cfg)).returncode == 0


@pytest.mark.parametrize("task", TASKS)
def test_retention_and_the_checkpoint_each_command_opens(sluice_bin, datasets, tmp_path, task):
    """The two newest checkpoints and the best-validating one are kept; eval, export and predict
    open best (else latest), and --checkpoint picks another."""
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r", epochs=5, every=1)
    assert run(sluice_bin, "train", str(cfg), "--set", "checkpoint_every=1").returncode == 0
    rows = [json.loads(l) for l in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    scores = [next(v for v in r.values() if isinstance(v, dict))["mrr" if task == "lp" else "auc"] for r in rows]
    best = f"epoch-{scores.index(max(scores)) + 1}-step-0"
    assert (tmp_path / "r/checkpoints/best").read_text().strip() == best
    kept = sorted(p.name for p in (tmp_path / "r/checkpoints").iterdir() if p.is_dir())
    assert set(kept) == {"epoch-4-step-0", "epoch-5-step-0", best}, kept
    assert f"(checkpoint {best})" in run(sluice_bin, "eval", str(tmp_path / "r")).stdout
    latest = run(sluice_bin, "eval", str(tmp_path / "r"), "--checkpoint", "latest")
    assert "(checkpoint epoch-5-step-0)" in latest.stdout, latest.stderr
    ex = run(sluice_bin, "export", str(tmp_path / "r"), "--out", str(tmp_path / "e"))
    assert f"exported checkpoint {best}" in ex.stdout, ex.stderr
    gone = "epoch-1-step-0" if best != "epoch-1-step-0" else "epoch-2-step-0"
    out = run(sluice_bin, "eval", str(tmp_path / "r"), "--checkpoint", gone)
    assert out.returncode != 0 and f"no checkpoint '{gone}'" in one_line(out) and "it has: " in out.stderr
    for command in ("eval", "export", "predict"):
        assert "best" in run(sluice_bin, command, "--help").stdout


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("sig,code", [("INT", 130), ("TERM", 143)])
def test_a_signal_finishes_the_step_checkpoints_and_resumes_exactly(sluice_bin, datasets, tmp_path,
                                                                    task, sig, code):
    """Ctrl-C or SIGTERM (raised by the run itself at step 30, through its real handlers): the
    step finishes, a checkpoint is written, the exit is 130 or 143 with a message; --resume then
    ends at the same model as an uninterrupted run."""
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "whole")
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    part = tmp_path / "part"
    env = dict(os.environ, SLUICE_CRASH_AT=f"step:30:{sig}")
    out = subprocess.run([str(sluice_bin), "train", str(cfg), "--set", f"run_dir={part}"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == code, out.stderr
    assert "interrupted in epoch 1: checkpoint epoch-0-step-30 written" in out.stdout
    assert "--resume" in out.stderr and json.loads((part / "summary.json").read_text())["interrupted"]
    res = run(sluice_bin, "train", str(cfg), "--set", f"run_dir={part}", "--resume")
    assert res.returncode == 0, res.stderr
    assert model_bytes(sluice_bin, task, part) == model_bytes(sluice_bin, task, tmp_path / "whole")


@pytest.mark.parametrize("task", TASKS)
def test_checkpoints_within_epochs_are_incremental_and_change_nothing(sluice_bin, datasets, tmp_path, task):
    """checkpoint_every 0.25: the epoch stops at each quarter, checkpoints and goes on, ending at
    the same model as checkpoints at epoch ends only; most table copies are the checkpoint that
    retention drops brought up to date, each equal to the table it copied (the last one to the
    run's table, a mid-epoch one by resuming from it to the same model)."""
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "whole")
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    part = tmp_path / "part"
    out = run(sluice_bin, "train", str(cfg), "--set", f"run_dir={part}", "--set", "checkpoint_every=0.25")
    assert out.returncode == 0, out.stderr
    copies = json.loads((part / "summary.json").read_text())["checkpoints"]
    assert copies["table_copies_full"] + copies["table_copies_incremental"] == 8, copies
    assert copies["table_copies_incremental"] >= 5 and copies["table_bytes_written"] <= copies["table_bytes"]
    assert "copies incremental" in out.stdout
    whole = model_bytes(sluice_bin, task, tmp_path / "whole")
    assert model_bytes(sluice_bin, task, part) == whole
    table = "nodes.bin" if task == "lp" else "rows.bin"
    kept = sorted(p.name for p in (part / "checkpoints").iterdir() if p.is_dir())
    assert len(kept) == 2 and kept[1] == "epoch-2-step-0" and kept[0].startswith("epoch-1-step-"), kept
    assert (part / "checkpoints/epoch-2-step-0" / table).read_bytes() == (part / "tables" / table).read_bytes()
    # Resume from the mid-epoch checkpoint (an incremental copy): the same model again.
    import shutil
    shutil.rmtree(part / "checkpoints/epoch-2-step-0")
    shutil.rmtree(part / "export-check")
    (part / "checkpoints/latest").write_text(kept[0] + "\n")
    res = run(sluice_bin, "train", str(cfg), "--set", f"run_dir={part}", "--resume")
    assert res.returncode == 0, res.stderr
    assert model_bytes(sluice_bin, task, part) == whole


def test_checkpoint_every_takes_fractions_and_whole_epochs_only(sluice_bin, datasets, tmp_path):
    ds, _ = datasets["lp"]
    cfg = write_config("lp", tmp_path / "c.yaml", ds, tmp_path / "r")
    out = run(sluice_bin, "train", str(cfg), "--set", "checkpoint_every=1.5")
    assert out.returncode == 2, out.stderr
    assert "checkpoint_every" in one_line(out) and "whole number of epochs" in one_line(out)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("task", TASKS)
def test_damaged_checkpoint_files_are_one_line_naming_them(sluice_bin, datasets, tmp_path, task):
    """A truncated dense file (it used to print libtorch's 19-line stack naming no file) or one
    flipped bit in a table (it used to be resumed silently) is one line naming the file, for
    --resume and eval alike."""
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r")
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    ckpt = tmp_path / "r/checkpoints/epoch-2-step-0"
    dense, table = ("relations.pt", "nodes.bin") if task == "lp" else ("dense.pt", "rows.bin")
    original = (ckpt / dense).read_bytes()
    (ckpt / dense).write_bytes(original[: len(original) // 2])
    for args in (["eval", str(tmp_path / "r")], ["train", str(cfg), "--resume", "--set", "train.epochs=3"]):
        out = run(sluice_bin, *args)
        assert out.returncode == 1, out.stderr
        assert f"{ckpt}/{dense}: size does not match the model" in one_line(out)
    (ckpt / dense).write_bytes(original)
    data = bytearray((ckpt / table).read_bytes())
    data[len(data) // 3] ^= 0x10
    (ckpt / table).write_bytes(bytes(data))
    for args in (["eval", str(tmp_path / "r")], ["export", str(tmp_path / "r"), "--out", str(tmp_path / "x")]):
        out = run(sluice_bin, *args)
        assert out.returncode == 1 and f"{ckpt}/{table}: checksum mismatch" in one_line(out)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("task", TASKS)
def test_a_checkpoint_of_the_older_format_is_refused(sluice_bin, datasets, tmp_path, task):
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r", epochs=1)
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    (tmp_path / "r/checkpoints/epoch-1-step-0/state.json").write_text(
        '{"epoch": 1, "step": 0, "seed": 3, "config": "abcd0123", "dataset": "0123abcd"}\n')
    out = run(sluice_bin, "eval", str(tmp_path / "r"))
    assert out.returncode == 1 and "older format (version 1" in one_line(out)


@pytest.mark.parametrize("task", TASKS)
def test_resuming_with_other_threads_is_accepted_with_a_warning(sluice_bin, datasets, tmp_path, task):
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r", epochs=1)
    assert run(sluice_bin, "train", str(cfg), "--set", "threads.total=2").returncode == 0
    out = run(sluice_bin, "train", str(cfg), "--resume", "--set", "train.epochs=2", "--set", "threads.total=1")
    assert out.returncode == 0, out.stderr
    warning = [l for l in out.stdout.splitlines() if l.startswith("warning: resuming with threads")]
    assert len(warning) == 1 and "no longer bitwise equal" in warning[0], out.stdout


def bench_summary_fields(task: str) -> list:
    """The summary.json fields bench/lp_bench.py or bench/dlrm_bench.py reads."""
    sys.path.insert(0, str(ROOT / "bench"))
    import dlrm_bench
    import lp_bench
    return lp_bench.SUMMARY_FIELDS if task == "lp" else dlrm_bench.SUMMARY_FIELDS


@pytest.mark.parametrize("task", TASKS)
def test_summary_json_holds_every_field_the_benchmarks_read(sluice_bin, datasets, tmp_path, task):
    ds, _ = datasets[task]
    cfg = write_config(task, tmp_path / "c.yaml", ds, tmp_path / "r", epochs=1)
    out = run(sluice_bin, "train", str(cfg))
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "r/summary.json").read_text())
    fields = bench_summary_fields(task)
    assert fields
    for field in fields:
        section, _, key = field.rpartition(".")
        node = summary[section] if section else summary
        assert key in node, f"summary.json has no {field}: {summary}"
    assert summary["task"] == ("link_prediction" if task == "lp" else "recommendation")
    assert summary["units_trained"] > 0 and summary["peak_rss_bytes"] > 0
    assert (tmp_path / "r/summary.txt").read_text() in out.stdout


def test_train_makes_the_openmp_workers_sleep_unless_the_environment_says(sluice_bin, datasets, tmp_path):
    # `sluice train` starts itself again with OMP_WAIT_POLICY=passive (libgomp reads it only when
    # loaded); a policy the environment names is kept; the same model either way.
    ds, _ = datasets["lp"]
    tables = {}
    for policy in (None, "active"):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy:
            env["OMP_WAIT_POLICY"] = policy
        run_dir = tmp_path / f"r-{policy}"
        cfg = write_config("lp", tmp_path / f"{policy}.yaml", ds, run_dir, epochs=1)
        out = subprocess.run([str(sluice_bin), "train", str(cfg)], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["threads"]["omp_wait_policy"] == (policy or "passive")
        tables[policy] = (run_dir / "tables/nodes.bin").read_bytes()
    assert tables[None] == tables["active"]


def test_the_summary_names_the_malloc_the_run_trained_on(sluice_bin, datasets, tmp_path):
    # The executable links jemalloc when the build finds libjemalloc-dev (not under sanitizers,
    # which bring their own malloc); the run finds it at run time and says so (train/allocator.h).
    needed = subprocess.run(["readelf", "-d", str(sluice_bin)], capture_output=True, text=True).stdout
    linked = "libjemalloc" in needed
    dev = any(pathlib.Path(d, "libjemalloc.so").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/local/lib"))
    if dev and "libasan" not in needed and "libtsan" not in needed:
        assert linked, "libjemalloc-dev is installed but the sluice executable does not link it"
    expected = "jemalloc" if linked or "jemalloc" in os.environ.get("LD_PRELOAD", "") else "glibc"
    ds, _ = datasets["lp"]
    cfg = write_config("lp", tmp_path / "c.yaml", ds, tmp_path / "r", epochs=1)
    out = run(sluice_bin, "train", str(cfg))
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "r/summary.json").read_text())["allocator"] == expected
    assert f"; malloc {expected}" in out.stdout


def test_a_non_finite_dense_feature_is_one_line_naming_the_record(sluice_bin, datasets, tmp_path):
    """One NaN among the dense features used to train on with loss nan, exit 0, and then hang
    evaluation (AUC looped on NaN scores)."""
    import shutil
    bad = tmp_path / "nan"
    shutil.copytree(datasets["dlrm"][0], bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    f = manifest["files"]["samples.train"]
    rec = np.dtype({"names": ["sparse", "dense", "label"],
                    "formats": [(np.uint64, (4,)), (np.float32, (3,)), np.float32],
                    "offsets": [0, 32, 44], "itemsize": 48})
    data = np.fromfile(bad / f["path"], dtype=rec)
    data["dense"][777, 1] = np.nan
    data.tofile(bad / f["path"])
    cfg = write_config("dlrm", tmp_path / "c.yaml", bad, tmp_path / "r", mode="in_memory")
    out = run(sluice_bin, "train", str(cfg))
    assert out.returncode == 2
    line = one_line(out)
    assert "samples.train record 777: dense feature 1 is nan" in line and "samples/train.bin" in line, line


def test_a_diverging_loss_stops_the_run_naming_the_step(sluice_bin, datasets, tmp_path):
    cfg = write_config("dlrm", tmp_path / "c.yaml", datasets["dlrm"][0], tmp_path / "r", mode="in_memory")
    out = run(sluice_bin, "train", str(cfg), "--set", "train.dense_optimizer=sgd", "--set", "train.dense_lr=1e6")
    assert out.returncode == 1, out.stdout
    line = one_line(out)
    assert "training diverged: the loss is" in line and "at epoch 1, step" in line, line


@pytest.mark.parametrize("mode", ["in_memory", "out_of_core"])
def test_evaluation_scores_every_sample_of_the_split(sluice_bin, datasets, tmp_path, mode):
    """A step's batch is read before compute releases it: an evaluation that read a batch after
    Computed() lost the split's last steps now and then (their slots were refilled)."""
    ds, _ = datasets["dlrm"]
    test = json.loads((ds / "manifest.json").read_text())["counts"]["samples"]["test"]
    cfg = write_config("dlrm", tmp_path / "c.yaml", ds, tmp_path / "r", every=1, mode=mode)
    assert run(sluice_bin, "train", str(cfg)).returncode == 0
    rows = [json.loads(l) for l in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    assert [r["test"]["samples"] for r in rows] == [test, test]
    for _ in range(3):
        out = run(sluice_bin, "predict", str(tmp_path / "r"), "-k", str(test))
        assert out.returncode == 0, out.stderr
        assert len(out.stdout.splitlines()) == test + 2 and f"({test} samples)" in out.stdout
