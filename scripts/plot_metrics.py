#!/usr/bin/env python3
"""Plots a run directory's metrics.jsonl (loss and validation MRR/Hits per epoch) into
RUN_DIR/metrics.png. Needs matplotlib (Debian: python3-matplotlib; scripts/install_deps.sh --full).

  /usr/bin/python3 scripts/plot_metrics.py runs/NAME
"""
import json
import pathlib
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    run = pathlib.Path(sys.argv[1])
    path = run / "metrics.jsonl"
    if not path.exists():
        print(f"plot_metrics: {path}: no such file (is {run} a run directory?)", file=sys.stderr)
        return 1
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_metrics: matplotlib is not installed (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 1
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot([r["epoch"] for r in rows], [r["loss"] for r in rows], marker="o")
    a.set_xlabel("epoch")
    a.set_ylabel("training loss")
    valid = [r for r in rows if "valid" in r]
    for key in ("mrr", "hits1", "hits10"):
        b.plot([r["epoch"] for r in valid], [r["valid"][key] for r in valid], marker="o", label=key)
    b.set_xlabel("epoch")
    b.set_ylabel("validation")
    b.legend()
    fig.suptitle(str(run))
    fig.tight_layout()
    out = run / "metrics.png"
    tmp = run / "metrics.png.tmp.png"
    fig.savefig(tmp, dpi=100)
    tmp.replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
