"""Reading text inputs: gzip or plain, CRLF or LF, a UTF-8 byte-order mark dropped, with
file:line errors and a stop/skip policy. Undecodable bytes, a damaged or truncated gzip stream
and a directory given as a file are one-line PrepErrors naming the file (and line)."""
from __future__ import annotations

import gzip
import pathlib
import sys
import zlib
from typing import Iterator

from .writer import PrepError


class TextFile:
    """Lines of a text file (line ends kept), counting them so a decoding or gzip error names
    the line it stopped at."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.number = 0
        gz = path.suffix == ".gz"
        try:
            raw = gzip.open(path, "rt", encoding="utf-8-sig", newline="") if gz else \
                open(path, "rt", encoding="utf-8-sig", newline="")
        except IsADirectoryError:
            raise PrepError(f"{path}: is a directory, expected a file") from None
        except PermissionError:
            raise PrepError(f"{path}: permission denied") from None
        self._f = raw

    def __enter__(self) -> "TextFile":
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def __iter__(self) -> Iterator[str]:
        try:
            for line in self._f:
                self.number += 1
                yield line
        except UnicodeDecodeError:
            raise PrepError(self._undecodable()) from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise PrepError(f"{self.path}: not a valid gzip file ({e})") from None
        except EOFError:
            raise PrepError(f"{self.path}: the gzip stream is truncated after line "
                            f"{self.number}") from None

    def _undecodable(self) -> str:
        """The first line that is not UTF-8 (text is decoded in blocks, so the error itself
        does not say which)."""
        opener = gzip.open if self.path.suffix == ".gz" else open
        with opener(self.path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    return (f"{self.path}:{number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at "
                            f"column {e.start + 1}); convert the file to UTF-8 first (iconv)")
        return f"{self.path}: not UTF-8 text; convert the file to UTF-8 first (iconv)"


def open_text(path: str | pathlib.Path) -> TextFile:
    path = pathlib.Path(path)
    if not path.exists():
        raise PrepError(f"{path}: no such file")
    if path.is_dir():
        raise PrepError(f"{path}: is a directory, expected a file")
    return TextFile(path)


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
