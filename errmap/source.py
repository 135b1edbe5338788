"""Sources: turn the paths a user gives into streams of byte chunks.

Plain files, `.gz` files (a truncated one yields what it holds, then a warning), directories
(recursively, e.g. a Ray session's logs/), globs and stdin. UTF-16 text is re-encoded as UTF-8.
Every problem with an input is an `InputError` naming the file, never a traceback.
"""

from __future__ import annotations

import codecs
import glob
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 1 << 20


class InputError(Exception):
    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def _reason(exc: OSError) -> str:
    return exc.strerror.lower() if exc.strerror else str(exc)


@dataclass
class Source:
    """One input and what reading it found."""

    path: str
    bytes_read: int = 0
    lines: int = 0
    warning: str | None = None
    error: str | None = None

    def chunks(self) -> Iterator[bytes]:
        """Byte chunks of this source; raises InputError when it cannot be opened."""
        if self.path == "-":
            raw = _read_fd(sys.stdin.buffer.fileno())
        else:
            raw = self._read_file()
        yield from self._count(_utf16_to_utf8(raw))

    def _count(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.bytes_read += len(chunk)
            yield chunk

    def _read_file(self) -> Iterator[bytes]:
        try:
            f = open(self.path, "rb")
        except IsADirectoryError:
            raise InputError(self.path, "is a directory") from None
        except OSError as exc:
            raise InputError(self.path, _reason(exc)) from None
        with f:
            if f.read(2) == b"\x1f\x8b":
                f.seek(0)
                yield from self._read_gzip(f)
                return
            f.seek(0)
            while chunk := f.read(CHUNK):
                yield chunk

    def _read_gzip(self, f) -> Iterator[bytes]:
        """Decompress member by member, yielding as it goes, so a cut file gives all it holds."""
        d = zlib.decompressobj(wbits=31)
        inside = False  # fed a member that has not ended yet
        try:
            while data := f.read(CHUNK):
                while data:
                    inside = True
                    yield d.decompress(data)
                    data = b""
                    if d.eof:
                        inside, data = False, d.unused_data
                        d = zlib.decompressobj(wbits=31)
        except zlib.error as exc:
            self.warning = f"gzip data is damaged ({exc}); read up to the damage"
            return
        if inside:
            yield d.flush()
            self.warning = "gzip data ends early (the file is truncated); read up to the break"


def _read_fd(fd: int) -> Iterator[bytes]:
    """Whatever a pipe holds as soon as it arrives (no waiting for a full chunk)."""
    while True:
        try:
            chunk = os.read(fd, CHUNK)
        except OSError as exc:
            raise InputError("-", _reason(exc)) from None
        if not chunk:
            return
        yield chunk


def _utf16_to_utf8(chunks: Iterator[bytes]) -> Iterator[bytes]:
    first = next(chunks, b"")
    if first[:2] not in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        if first:
            yield first
        yield from chunks
        return
    decoder = codecs.getincrementaldecoder("utf-16")("replace")
    yield decoder.decode(first).encode()
    for chunk in chunks:
        yield decoder.decode(chunk).encode()
    yield decoder.decode(b"", final=True).encode()


@dataclass
class Expanded:
    sources: list[Source] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def expand(paths: list[str]) -> Expanded:
    """Files as given, directories walked recursively (sorted), unmatched globs expanded."""
    out = Expanded()
    for p in paths:
        if p == "-":
            out.sources.append(Source("-"))
        elif os.path.isdir(p):
            files = sorted(str(f) for f in Path(p).rglob("*") if f.is_file())
            if not files:
                out.errors.append(InputError(p, "directory holds no files"))
            out.sources += [Source(f) for f in files]
        elif not os.path.lexists(p) and glob.has_magic(p):
            found = sorted(glob.glob(p, recursive=True))
            if not found:
                out.errors.append(InputError(p, "no file matches this pattern"))
            out.sources += [Source(f) for f in found if os.path.isfile(f)]
        else:
            out.sources.append(Source(p))
    return out
