#!/usr/bin/env python3
"""PyTorch Geometric on the same GPU, the reference sluice's node classification on the GPU is
compared with (bench/gpu_bench.py --nc).

The same model as sluice's built-in GraphSage: SAGEConv layers (mean aggregation; PyG's
neighbour transform carries the bias, sluice's root transform: the same family), ReLU between
layers, dropout on every layer's input, Adam with weight decay, mean cross-entropy over the
seeds; features and the model in GPU memory.

Sampling, whichever works on the machine:
  neighborloader  torch_geometric.loader.NeighborLoader (needs pyg-lib or torch-sparse), the
                  usual PyG mini-batch (the model runs on the sampled subgraph, the seeds' rows
                  are the output), sampling on the CPU workers inside the timed epoch;
  sluice-blocks   when NeighborLoader cannot sample here: sluice's own samples, exported once
                  by bench/nc_blocks_export (the blocks sluice's training draws, bit for bit),
                  loaded to GPU memory before the timed epochs, fed layer by layer to SAGEConv
                  as bipartite graphs. Sampling is then not in the epoch time (in sluice's it is,
                  overlapped with compute).

Prints one JSON line: mode, epoch seconds, test accuracy (sampled with the same fanouts).

  python3 bench/pyg_reference.py DATASET --export-bin build/gpu/bench/nc_blocks_export \\
      [--fanouts 15,10,5] [--batch 512] [--hidden 256] [--lr 0.003] [--epochs 3]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def read(ds: pathlib.Path, manifest: dict, role: str) -> np.ndarray:
    f = manifest["files"][role]
    return np.fromfile(ds / f["path"], dtype=np.dtype(f["dtype"])).reshape(f["shape"])


class Sage(torch.nn.Module):
    def __init__(self, conv, dims: list[int], dropout: float):
        super().__init__()
        self.convs = torch.nn.ModuleList(conv(a, b, aggr="mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward_subgraph(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = torch.nn.functional.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i + 1 < len(self.convs):
                x = torch.relu(x)
        return x

    def forward_blocks(self, x, blocks):
        for i, (conv, (num_src, num_dst, edge_index)) in enumerate(zip(self.convs, blocks)):
            x = torch.nn.functional.dropout(x[:num_src], self.dropout, self.training)
            x = conv((x, x[:num_dst]), edge_index, size=(num_src, num_dst))
            if i + 1 < len(self.convs):
                x = torch.relu(x)
        return x


def load_blocks(path: pathlib.Path, device) -> tuple:
    """A step file of nc_blocks_export: seeds, nodes, and per block (num_src, num_dst, edge_index)."""
    w = np.fromfile(path, dtype=np.int64)
    nb = int(w[0])
    heads = w[1:1 + 4 * nb].reshape(nb, 4)
    p = 1 + 4 * nb
    n_seeds, n_nodes = int(w[p]), int(w[p + 1])
    p += 2
    seeds = w[p:p + n_seeds]
    p += n_seeds
    nodes = torch.from_numpy(w[p:p + n_nodes].copy()).to(device)
    p += n_nodes
    blocks = []
    for num_src, num_dst, n_off, n_src in heads:
        offsets = w[p:p + n_off]
        p += n_off
        src = torch.from_numpy(w[p:p + n_src].copy())
        p += n_src
        dst = torch.repeat_interleave(torch.arange(int(num_dst)), torch.from_numpy(np.diff(offsets)))
        blocks.append((int(num_src), int(num_dst), torch.stack([src, dst]).to(device)))
    return seeds, nodes, blocks


def export(args, split: str, out: pathlib.Path, seed: int, epoch: int) -> list[tuple]:
    cmd = [str(args.export_bin), "--dataset", str(args.dataset), "--out", str(out), "--split", split,
           "--fanouts", args.fanouts, "--batch", str(args.batch), "--seed", str(seed), "--epoch", str(epoch)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"pyg_reference: {' '.join(cmd)}: {r.stderr.strip()}")
    return [load_blocks(p, args.device_obj) for p in sorted(out.glob("step_*.bin"))]


def neighbor_loader(data, nodes, args, shuffle: bool):
    from torch_geometric.loader import NeighborLoader
    return NeighborLoader(data, num_neighbors=[int(f) for f in args.fanouts.split(",")], batch_size=args.batch,
                          input_nodes=torch.from_numpy(nodes), shuffle=shuffle, num_workers=args.workers,
                          persistent_workers=args.workers > 0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", type=pathlib.Path)
    p.add_argument("--export-bin", type=pathlib.Path, help="bench/nc_blocks_export (for sluice-blocks)")
    p.add_argument("--mode", choices=["auto", "neighborloader", "sluice-blocks"], default="auto")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1, help="train.seed (sluice-blocks: the same samples as sluice)")
    p.add_argument("--eval-seed", type=int, default=7)
    p.add_argument("--workers", type=int, default=8, help="NeighborLoader's sampling workers")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    args.device_obj = torch.device(args.device)
    from torch_geometric.data import Data
    from torch_geometric.nn import SAGEConv

    manifest = json.loads((args.dataset / "manifest.json").read_text())
    x = torch.from_numpy(read(args.dataset, manifest, "nodes.features").astype(np.float32)).to(args.device_obj)
    y = torch.from_numpy(read(args.dataset, manifest, "nodes.labels").astype(np.int64)).to(args.device_obj)
    train, test = (read(args.dataset, manifest, f"nodes.{s}") for s in ("train", "test"))
    classes = int(manifest["counts"]["classes"])
    torch.manual_seed(args.seed)
    layers = len(args.fanouts.split(","))
    model = Sage(SAGEConv, [x.shape[1]] + [args.hidden] * (layers - 1) + [classes], args.dropout).to(args.device_obj)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    mode = args.mode
    loader = None
    if mode in ("auto", "neighborloader"):
        try:
            src = read(args.dataset, manifest, "edges.train.by_dst.src").astype(np.int64)
            dst = read(args.dataset, manifest, "edges.train.by_dst.dst").astype(np.int64)
            data = Data(edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=x.shape[0])
            data.n_id = torch.arange(x.shape[0])
            loader = neighbor_loader(data, train, args, shuffle=True)
            next(iter(loader))
            mode = "neighborloader"
        except Exception as e:  # ImportError: neither pyg-lib nor torch-sparse
            if mode == "neighborloader":
                raise
            log(f"pyg_reference: NeighborLoader cannot sample here ({type(e).__name__}: {str(e)[:200]}); "
                f"using sluice's exported blocks")
            mode = "sluice-blocks"
    tmp = tempfile.TemporaryDirectory()
    epochs = []
    for epoch in range(args.epochs):
        if mode == "sluice-blocks":  # loaded before the clock starts
            steps = export(args, "train", pathlib.Path(tmp.name) / f"train{epoch}", args.seed, epoch)
        model.train()
        torch.cuda.synchronize() if args.device_obj.type == "cuda" else None
        start = time.perf_counter()
        total, n = 0.0, 0
        if mode == "neighborloader":
            for batch in loader:
                batch = batch.to(args.device_obj)
                opt.zero_grad()
                out = model.forward_subgraph(x[batch.n_id], batch.edge_index)[:batch.batch_size]
                loss = torch.nn.functional.cross_entropy(out, y[batch.n_id[:batch.batch_size]])
                loss.backward()
                opt.step()
                total += float(loss) * batch.batch_size
                n += batch.batch_size
        else:
            for seeds, nodes, blocks in steps:
                opt.zero_grad()
                out = model.forward_blocks(x[nodes], blocks)
                loss = torch.nn.functional.cross_entropy(out, y[nodes[:len(seeds)]])
                loss.backward()
                opt.step()
                total += float(loss) * len(seeds)
                n += len(seeds)
        torch.cuda.synchronize() if args.device_obj.type == "cuda" else None
        epochs.append(time.perf_counter() - start)
        log(f"pyg_reference: epoch {epoch + 1}: {epochs[-1]:.3f} s, loss {total / max(n, 1):.4f} ({mode})")
    model.eval()
    right = seen = 0
    with torch.no_grad():
        if mode == "neighborloader":
            for batch in neighbor_loader(data, test, args, shuffle=False):
                batch = batch.to(args.device_obj)
                out = model.forward_subgraph(x[batch.n_id], batch.edge_index)[:batch.batch_size]
                right += int((out.argmax(1) == y[batch.n_id[:batch.batch_size]]).sum())
                seen += batch.batch_size
        else:
            for seeds, nodes, blocks in export(args, "test", pathlib.Path(tmp.name) / "test", args.eval_seed, 0):
                out = model.forward_blocks(x[nodes], blocks)
                right += int((out.argmax(1) == y[nodes[:len(seeds)]]).sum())
                seen += len(seeds)
    print(json.dumps({"mode": mode, "epoch_s": [round(e, 4) for e in epochs], "test_accuracy": right / max(seen, 1),
                      "batch": args.batch, "fanouts": args.fanouts, "hidden": args.hidden}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
