#!/usr/bin/env python3
"""A plain PyTorch DLRM, the reference sluice's DLRM is compared with (bench/dlrm_bench.py).

The facebookresearch DLRM's structure and defaults in its CPU setup: one nn.EmbeddingBag per
categorical feature (sum mode, one id per bag, sparse gradients), tables in RAM; bottom MLP
over the dense features; pairwise dot interaction (strict lower triangle) concatenated with the
bottom output; top MLP to one logit; binary cross-entropy; plain SGD on everything. It reads the
same sample file as sluice (docs/format.md records, ids reduced modulo the table size).

Prints one JSON line: end-to-end samples/s (reading and converting each batch from the file
inside the timed loop) and compute-only samples/s (batches converted beforehand).

--device cuda runs it on a GPU: the MLPs and the interaction there, the tables either there too
(--tables device) or in host memory (--tables host: the EmbeddingBags and their sparse SGD on the
CPU, their outputs copied to the GPU and their gradients back), batches copied each step."""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
from sluice_prep.recsys import record_dtype  # noqa: E402


class Dlrm(torch.nn.Module):
    def __init__(self, dense: int, tables: int, rows: int, dim: int, bottom: list[int], top: list[int]):
        super().__init__()
        layers, n = [], dense
        for h in bottom + [dim]:
            layers += [torch.nn.Linear(n, h), torch.nn.ReLU()]
            n = h
        self.bottom = torch.nn.Sequential(*layers)
        self.emb = torch.nn.ModuleList(torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
                                       for _ in range(tables))
        for e in self.emb:
            torch.nn.init.uniform_(e.weight, -0.05, 0.05)
        f = tables + 1
        self.li, self.lj = torch.tril_indices(f, f, offset=-1)
        layers, n = [], dim + f * (f - 1) // 2
        for h in top:
            layers += [torch.nn.Linear(n, h), torch.nn.ReLU()]
            n = h
        layers += [torch.nn.Linear(n, 1)]
        self.top = torch.nn.Sequential(*layers)

    def forward(self, dense, ids, offsets):
        x = self.bottom(dense)
        embs = [e(ids[:, k].to(e.weight.device), offsets.to(e.weight.device)).to(x.device)
                for k, e in enumerate(self.emb)]
        t = torch.stack([x] + embs, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows per table (ids modulo this)")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bottom", default="512,256", help="bottom MLP hidden widths")
    ap.add_argument("--top", default="512,256", help="top MLP hidden widths")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the model computes")
    ap.add_argument("--tables", default="device", choices=["device", "host"],
                    help="with --device cuda: the tables in GPU memory or in host memory")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    manifest = json.loads((pathlib.Path(args.dataset) / "manifest.json").read_text())
    c, d = manifest["record"]["sparse"], manifest["record"]["dense"]
    samples = np.memmap(pathlib.Path(args.dataset) / manifest["files"]["samples.train"]["path"],
                        dtype=record_dtype(c, d), mode="r")
    steps = min(args.steps, len(samples) // args.batch)
    widths = lambda text: [int(w) for w in text.split(",") if w]  # noqa: E731
    model = Dlrm(d, c, args.rows, args.dim, widths(args.bottom), widths(args.top))
    dev = torch.device(args.device)
    on_host = args.device == "cuda" and args.tables == "host"
    for name, child in model.named_children():
        if not (on_host and name == "emb"):
            child.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    offsets = torch.arange(args.batch)

    def batch(i):
        r = samples[i * args.batch:(i + 1) * args.batch]
        ids = torch.from_numpy((r["sparse"] % np.uint64(args.rows)).astype(np.int64))
        return (torch.from_numpy(np.ascontiguousarray(r["dense"])).to(dev), ids,
                torch.from_numpy(r["label"].copy()).to(dev))

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    def step(dense, ids, labels):
        opt.zero_grad()
        loss = loss_fn(model(dense, ids, offsets), labels)
        loss.backward()
        opt.step()
        return loss

    for i in range(3):  # warm-up
        step(*batch(i))
    sync()
    start = time.perf_counter()
    for i in range(steps):
        step(*batch(i))
    sync()
    end_to_end = steps * args.batch / (time.perf_counter() - start)
    batches = [batch(i) for i in range(steps)]
    sync()
    start = time.perf_counter()
    for b in batches:
        step(*b)
    sync()
    compute_only = steps * args.batch / (time.perf_counter() - start)
    print(json.dumps({"system": "pytorch-reference", "torch": torch.__version__, "threads": args.threads,
                      "device": args.device, "tables_on": "host" if on_host or args.device == "cpu" else "device",
                      "tables": c, "rows": args.rows, "batch": args.batch, "steps": steps,
                      "end_to_end_samples_per_s": round(end_to_end), "compute_only_samples_per_s": round(compute_only)}))


if __name__ == "__main__":
    main()
