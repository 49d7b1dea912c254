"""A synthetic click log with a planted ground truth, streamed.

Each of `sparse` categorical features draws ids from a Zipf(alpha) law over `vocab` values
(rank r becomes a scrambled 64-bit id). A hidden model gives every (feature, id) row a scalar
effect and a small embedding, both pure functions of (seed, feature, id); the click
probability is sigmoid(bias + dense weights . dense + sum of row effects + <e_0, e_1>), and the
label is drawn from it. With effect_decay R0 > 0, a value of Zipf rank r (0 = most frequent) has
its effect and embedding scaled by (1 + r/R0)^-1/2: rare values carry little signal, as in real
logs, so the ground truth can be learned from the log itself (with equal scales, the millions
of values seen once or never carry signal no model can recover). The planted model's own test AUC (its true probabilities against the
drawn labels) goes into the manifest, so a learned model's AUC can be compared with it."""
from __future__ import annotations

import sys

import numpy as np

from .graph import Progress
from .keyed import mix as _mix
from .recsys import record_dtype
from .writer import DatasetWriter, PrepError

CHUNK = 1 << 16
MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _gauss(key: np.ndarray, salt: int) -> np.ndarray:
    """A standard normal per key (Box-Muller on two hashed uniforms)."""
    with np.errstate(over="ignore"):
        a = _mix(key + np.uint64(2 * salt + 1) * np.uint64(0x9E3779B97F4A7C15))
        b = _mix(a + np.uint64(0x632BE59BD9B4E019))
    u1 = ((a >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53
    u2 = (b >> np.uint64(11)).astype(np.float64) / 2.0**53
    return np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve by the rank-sum formula (ties get their mean rank)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    mean_rank = np.bincount(inverse, weights=ranks[order]) / counts
    ranks[order] = mean_rank[inverse]
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def generate_clicks(out: str, samples: int, sparse: int, dense: int, vocab: int, alpha: float,
                    test_frac: float, seed: int, overwrite: bool, effect_decay: float = 0.0) -> None:
    if samples < 2 or sparse < 2 or vocab < 2 or not 0 < test_frac < 1 or effect_decay < 0:
        raise PrepError("gen-clicks needs samples >= 2, sparse >= 2, vocab >= 2, 0 < test-frac < 1, "
                        "effect-decay >= 0")
    rec = record_dtype(sparse, dense)
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.arange(1, vocab + 1, dtype=np.float64) ** -alpha)
    cdf /= cdf[-1]
    dense_w = rng.normal(0, 0.3, dense)
    seed64 = np.uint64(seed & 0xFFFFFFFF) << np.uint64(32)
    writer = DatasetWriter(out, overwrite)
    try:
        n_test = max(1, int(samples * test_frac))
        split_sizes = {"train": samples - n_test, "test": n_test}
        files = {s: writer.array(f"samples.{s}", f"samples/{s}.bin", np.uint8, rec.itemsize,
                                 record=True) for s in split_sizes}
        test_p, test_y, clicks = [], [], {}
        progress = Progress("generating samples", samples)
        for split, total in split_sizes.items():
            clicks[split] = 0
            for start in range(0, total, CHUNK):
                n = min(CHUNK, total - start)
                r = np.zeros(n, dtype=rec)
                logit = np.full(n, -1.5)
                emb = []
                for f in range(sparse):
                    rank = np.searchsorted(cdf, rng.random(n)).astype(np.uint64)
                    ids = _mix(rank ^ seed64 ^ (np.uint64(f) << np.uint64(56)))
                    r["sparse"][:, f] = ids
                    scale = (1 + rank.astype(np.float64) / effect_decay) ** -0.5 if effect_decay else 1.0
                    logit += 0.5 * scale * _gauss(ids, 0)
                    if f < 2:
                        e = np.stack([_gauss(ids, 1 + k) for k in range(4)], axis=1)
                        emb.append(e * np.sqrt(scale)[:, None] if effect_decay else e)
                logit += 0.5 * (emb[0] * emb[1]).sum(axis=1)
                if dense:
                    x = rng.exponential(1.0, (n, dense))
                    r["dense"] = np.log1p(x)
                    logit += np.log1p(x) @ dense_w
                p = 1 / (1 + np.exp(-logit))
                y = (rng.random(n) < p).astype(np.float32)
                r["label"] = y
                clicks[split] += int(y.sum())
                if split == "test":
                    test_p.append(p)
                    test_y.append(y)
                files[split].append(r.view(np.uint8).reshape(n, rec.itemsize))
                progress.add(n)
        progress.finish()
        planted = auc(np.concatenate(test_p), np.concatenate(test_y))
        writer.commit({
            "task": "recommendation", "name": "generated-clicks",
            "counts": {"nodes": 0, "relations": 0, "feature_dim": 0, "classes": 0, "edges": {},
                       "samples": split_sizes},
            "record": {"sparse": sparse, "dense": dense, "bytes": rec.itemsize},
            "stats": {"planted_test_auc": planted, "zipf_alpha": alpha, "vocab_per_feature": vocab,
                      "effect_decay": effect_decay,
                      "click_rate": {s: clicks[s] / split_sizes[s] for s in split_sizes},
                      "seed": seed},
        })
        print(f"wrote {out}: planted test AUC {planted:.4f}", file=sys.stderr)
    except BaseException:
        writer.abort()
        raise
