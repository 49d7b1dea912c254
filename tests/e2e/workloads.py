"""One generated dataset and one out-of-core config per workload (link prediction, recommendation,
node classification), shared by the crash tests (test_crash.py) and the soak (scripts/soak.py).

`size` scales a workload: "small" trains in a second or two (the fault matrix runs it about 90
times), "crash" in several seconds, most of them training rather than starting (the crash tests
run it 41 times), "soak" gives epochs of several seconds over tables that are evicted and
reloaded constantly."""
import collections
import io
import json
import pathlib
import pickle
import re
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREP = [sys.executable, str(ROOT / "scripts/sluice_prep.py")]

SIZES = {
    # nodes, edges (graphs); samples, vocabulary (clicks)
    "small": {"lp": (3000, 40000), "rec": (24000, 6000), "nc": (4000, 30000)},
    "crash": {"lp": (12000, 200000), "rec": (100000, 20000), "nc": (12000, 120000)},
    "soak": {"lp": (50000, 600000), "rec": (200000, 50000), "nc": (30000, 300000)},
}
WORKLOADS = ("lp", "rec", "nc")


def _prep(*args) -> None:
    out = subprocess.run(PREP + [str(a) for a in args], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"sluice_prep {args[0]} failed: {out.stderr.strip()}")


def make_dataset(workload: str, folder: pathlib.Path, size: str = "small") -> pathlib.Path:
    """Generates the workload's dataset under `folder` (once) and returns its directory."""
    ds = folder / f"{workload}-{size}"
    if (ds / "manifest.json").exists():
        return ds
    folder.mkdir(parents=True, exist_ok=True)
    a, b = SIZES[size][workload]
    if workload == "lp":
        tsv = folder / f"{workload}-{size}.tsv"
        _prep("gen-graph", "--out", tsv, "--nodes", a, "--edges", b, "--relations", 3, "--seed", 5)
        _prep("edges", tsv, "--out", ds, "--partitions", 8, "--src-col", 0, "--dst-col", 1, "--rel-col", 2,
              "--valid-frac", 0.02, "--test-frac", 0.02)
    elif workload == "rec":
        _prep("gen-clicks", "--samples", a, "--sparse", 6, "--dense", 3, "--vocab", b, "--seed", 4, "--out", ds)
    else:
        _prep("gen-nc", "--nodes", a, "--edges", b, "--features", 32, "--seed", 5, "--partitions", 1,
              "--out", ds)
    return ds


def write_config(workload: str, path: pathlib.Path, dataset: pathlib.Path, run_dir: pathlib.Path,
                 epochs: int) -> pathlib.Path:
    """An out-of-core config that checkpoints every epoch: its tables (or features) do not fit
    the cache, so rows are written back and read again all the time."""
    common = [f"dataset: {dataset}", f"run_dir: {run_dir}", "progress: false", "checkpoint_every: 1"]
    if workload == "lp":
        body = ["model: {decoder: distmult, dim: 16}",
                f"train: {{epochs: {epochs}, batch: 500, chunks: 4, negatives: 50, seed: 3}}",
                "eval: {every: 1, max_edges: 500}",
                "storage: {mode: out_of_core, slots: 3, resident: 2, run_ahead: 2}"]
    elif workload == "rec":
        body = ["task: recommendation",
                "model: {dim: 8, bottom: [16], top: [16], ids: modulo, table_rows: 4096, linear: true}",
                f"train: {{epochs: {epochs}, batch: 200, optimizer: rowwise_adagrad, lr: 0.05, seed: 3}}",
                "eval: {every: 1}",
                "storage: {mode: out_of_core, backend: rowfile, cache_rows: 5000, window: 2, run_ahead: 2}"]
    else:
        nodes = json.loads((dataset / "manifest.json").read_text())["counts"]["nodes"]  # half cached
        body = ["task: node_classification",
                "model: {kind: graphsage, layers: 2, hidden: 32, fanouts: [5, 5], dropout: 0.5, "
                "embedding_dim: 16}",
                f"train: {{epochs: {epochs}, batch: 64, lr: 0.01, seed: 3}}",
                "eval: {every: 1, fanouts: [5, 5], batch: 64}",
                f"storage: {{mode: out_of_core, cache_rows: {max(2500, nodes // 2)}, window: 1, run_ahead: 1}}"]
    path.write_text("\n".join(common + body) + "\n")
    return path


POINTER = re.compile(r"0x[0-9a-f]{6,16}")


class _TorchObject:
    """A libtorch archive's module object: its attributes only."""

    def __setstate__(self, state):
        self.state = state

    @staticmethod
    def of(state):
        o = _TorchObject()
        o.state = state
        return o


class _Global(str):
    """A global an archive names: its name, and called, the call (name and arguments)."""

    def __new__(cls, module: str, name: str):
        return super().__new__(cls, name if module == "torch" else f"{module}.{name}")

    def __call__(self, *args):
        return _TorchObject.of((str(self), args))


class _ArchiveUnpickler(pickle.Unpickler):
    """Unpickles a libtorch archive's data.pkl without torch: tensors become (storage bytes,
    offset, size, stride), modules their attributes."""

    def __init__(self, data: bytes, storages: dict[str, bytes]):
        super().__init__(io.BytesIO(data))
        self.storages = storages

    def find_class(self, module, name):
        if module.startswith("__torch__"):
            return _TorchObject
        if module == "torch._utils" and name.startswith("_rebuild_tensor"):
            return lambda storage, offset, size, stride, *rest: ("tensor", storage, offset, tuple(size), tuple(stride))
        if module == "torch._utils" and name.startswith("_rebuild_parameter"):
            return lambda data, *rest: data
        if module == "torch.jit._pickle":  # type tags and typed lists wrap a value: the value
            return lambda value, *rest: value
        if module == "torch":
            return _Global(module, name)  # a storage type's name (persistent ids), or a call
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        # Another libtorch version's archive may name other globals: kept as what they are, so
        # two archives still compare by their contents.
        return _Global(module, name)

    def persistent_load(self, pid):
        return ("storage", pid[1], self.storages[pid[2]])


def _canonical(value, names: dict[str, str]):
    if isinstance(value, _TorchObject):
        return _canonical(value.state, names)
    if isinstance(value, dict):
        return sorted((names.get(str(k), str(k)), _canonical(v, names)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_canonical(v, names) for v in value]
    if isinstance(value, str):
        return names.get(value, value)
    return value


def _pointers(value, found: list[str]) -> None:
    """Heap addresses in the order they appear (param_groups lists a model's parameters in
    order, so an optimizer's state maps to them by position)."""
    if isinstance(value, _TorchObject):
        value = value.state
    if isinstance(value, dict):
        for k, v in value.items():
            _pointers(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _pointers(v, found)
    elif isinstance(value, str) and POINTER.fullmatch(value) and value not in found:
        found.append(value)


def torch_archive(data: bytes) -> bytes:
    """A libtorch archive (.pt) as its tensors' bytes and structure, with the heap addresses
    libtorch writes as an optimizer state's keys replaced by the position of that parameter in
    param_groups: comparable across processes (DESIGN.md: never the .pt bytes, which hold heap
    addresses, but tensor by tensor)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        prefix = pkl[:-len("data.pkl")] + "data/"
        storages = {n[len(prefix):]: z.read(n) for n in z.namelist() if n.startswith(prefix)}
        tree = _ArchiveUnpickler(z.read(pkl), storages).load()
    found: list[str] = []
    state = tree.state if isinstance(tree, _TorchObject) else None
    groups = state.get("param_groups") if isinstance(state, dict) else None
    _pointers(groups, found)
    _pointers(tree, found)
    names = {p: f"param{i}" for i, p in enumerate(found)}
    return repr(_canonical(tree, names)).encode()


def final_model(run_dir: pathlib.Path) -> dict[str, bytes]:
    """What defines the trained model, comparable byte for byte: every file of the latest
    checkpoint (tables, dense parameters, optimizer state; .pt archives through torch_archive)
    and the run's live table files."""
    ckpt = run_dir / "checkpoints" / (run_dir / "checkpoints/latest").read_text().strip()
    state = json.loads((ckpt / "state.json").read_text())
    files = {}
    for f in state["files"]:
        data = (ckpt / f["path"]).read_bytes()
        files[f"checkpoint/{f['path']}"] = torch_archive(data) if f["path"].endswith(".pt") else data
    files["checkpoint/epoch"] = str((state["epoch"], state["step"])).encode()
    tables = run_dir / "tables"
    if tables.is_dir():
        for p in sorted(tables.rglob("*.bin")):
            files[f"tables/{p.relative_to(tables)}"] = p.read_bytes()
    return files
