#!/usr/bin/env python3
"""Starts N ranks of a sluice run on this machine (docs/distributed.md), as torchrun would:

    scripts/sluice_launch.py -n 2 -- build/release/train/sluice train configs/x.yaml

Each rank gets the variables sluice reads (WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; a free port unless --port). Rank 0 talks to this terminal; the other
ranks' output goes to --logs (default: a folder made for the run, named at the start), and a
failing rank's last lines are printed. Ctrl-C reaches every rank, so all of them stop after the
same step and rank 0 writes the checkpoint. When one rank fails the others are stopped (they
would otherwise wait for it until dist.op_timeout). Exit status: the first failing rank's, else 0.
With several machines, run one launcher per machine with --nodes, --node-rank and --master.
"""
import argparse
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, required=True, help="ranks on this machine")
    p.add_argument("--nodes", type=int, default=1, help="machines in the run (each runs a launcher)")
    p.add_argument("--node-rank", type=int, default=0, help="this machine's place, 0 to nodes - 1")
    p.add_argument("--master", default="127.0.0.1", help="rank 0's machine (ADDR)")
    p.add_argument("--port", type=int, default=0, help="the rendezvous port (0: a free one; give it with --nodes > 1)")
    p.add_argument("--logs", default="", help="folder for ranks 1..N-1's output")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the sluice command line")
    a = p.parse_args(argv)
    if a.command[:1] == ["--"]:
        a.command = a.command[1:]
    if not a.command:
        p.error("no command: give it after --, e.g. -- sluice train x.yaml")
    if a.nproc < 1 or a.nodes < 1 or not 0 <= a.node_rank < a.nodes:
        p.error(f"impossible place: --nproc {a.nproc}, --nodes {a.nodes}, --node-rank {a.node_rank}")
    if a.nodes > 1 and a.port == 0:
        p.error("--nodes > 1: give every machine the same --port")
    return a


def main(argv) -> int:
    a = parse(argv)
    port = a.port or free_port()
    logs = pathlib.Path(a.logs) if a.logs else pathlib.Path(tempfile.mkdtemp(prefix="sluice-ranks-"))
    logs.mkdir(parents=True, exist_ok=True)
    world = a.nproc * a.nodes
    print(f"launch: {a.nproc} of {world} ranks at {a.master}:{port}; ranks' output in {logs}", flush=True)
    procs = []
    for local in range(a.nproc):
        rank = a.node_rank * a.nproc + local
        env = dict(os.environ, WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(local),
                   LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR=a.master, MASTER_PORT=str(port))
        if rank == 0:
            out = None
        else:
            out = open(logs / f"rank-{rank}.log", "w")
        procs.append((rank, subprocess.Popen(a.command, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                             start_new_session=True), out))
    # Ctrl-C and SIGTERM reach every rank (each in its own session, so the terminal's reaches
    # them only through here, once).
    def forward(sig, _frame):
        for _, p, _ in procs:
            if p.poll() is None:
                p.send_signal(sig)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    status = 0
    kill_at = None
    left = {rank for rank, _, _ in procs}
    while left:
        for rank, p, out in procs:
            if rank not in left or p.poll() is None:
                continue
            left.discard(rank)
            if p.returncode != 0 and status == 0:
                status = p.returncode if p.returncode > 0 else 128 - p.returncode
                if out is not None:
                    out.flush()
                    tail = (logs / f"rank-{rank}.log").read_text(errors="replace").splitlines()[-20:]
                    print(f"launch: rank {rank} failed (exit {p.returncode}); its last lines:", file=sys.stderr)
                    for line in tail:
                        print(f"  [rank {rank}] {line}", file=sys.stderr)
                interrupted = p.returncode in (130, 143, -2, -15)
                if not interrupted and kill_at is None:  # the others would wait for it until dist.op_timeout
                    kill_at = time.monotonic() + 5
                    for _, q, _ in procs:
                        if q.poll() is None:
                            q.terminate()
        if kill_at is not None and time.monotonic() > kill_at:
            for _, q, _ in procs:
                if q.poll() is None:
                    q.kill()
        time.sleep(0.05)
    for _, _, out in procs:
        if out is not None:
            out.close()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
