"""Reading text inputs: gzip or plain, CRLF or LF, with file:line errors and a stop/skip policy."""
from __future__ import annotations

import gzip
import pathlib
import sys
from typing import Iterator

from .writer import PrepError


def open_text(path: str | pathlib.Path):
    path = pathlib.Path(path)
    if not path.exists():
        raise PrepError(f"{path}: no such file")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, "rt", encoding="utf-8", newline="")


class BadLines:
    """The on-error policy: 'stop' raises at the first malformed line; 'skip' counts them."""

    def __init__(self, policy: str):
        if policy not in ("stop", "skip"):
            raise PrepError(f"--on-error must be stop or skip, got '{policy}'")
        self.policy, self.skipped, self.first = policy, 0, None

    def bad(self, where: str, why: str) -> None:
        if self.policy == "stop":
            raise PrepError(f"{where}: {why} (pass --on-error skip to skip such lines)")
        self.skipped += 1
        self.first = self.first or f"{where}: {why}"

    def report(self) -> None:
        if self.skipped:
            print(f"skipped {self.skipped:,} malformed lines (first: {self.first})", file=sys.stderr)


def lines(path: str | pathlib.Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its line end), skipping empty lines."""
    with open_text(path) as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield number, line
