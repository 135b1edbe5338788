"""Following a file like `tail -F`: wait for it, hold partial lines, survive rotation and truncation.

Every generation of the file (each new inode at the path) is opened as soon as it is seen, checked
on every read, and kept open until it is read to the end: a renamed file is drained until the
writer has moved to the new one (the new one has data) or it stays quiet for QUIET seconds, so
logrotate's create mode and delete+recreate lose nothing. Truncation (copytruncate) is seen by
size and by the file's first bytes changing, even when a burst has already grown it past the read
offset; it starts again at the top with a notice. Each generation gets its own scanner, so line
numbers always match the file as it is on disk. A FIFO is read as one stream.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from typing import BinaryIO

from errmap.matcher import Matcher
from errmap.scan import OnNew, feed, scan_source
from errmap.source import CHUNK, InputError, Recoder, Source
from errmap.triage import Triage

POLL = 0.1  # seconds between checks when the file has no new data
QUIET = 1.0  # seconds a rotated file must stay quiet before it counts as finished
HEAD = 1024  # bytes kept from the top of a generation to recognize it after a copytruncate


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class _Generation:
    """One open inode of the followed path, its scanner and where the last data came."""

    def __init__(self, f: BinaryIO, matcher: Matcher, path: str):
        st = os.fstat(f.fileno())
        self.f, self.ident = f, (st.st_dev, st.st_ino)
        self.matcher, self.path = matcher, path
        self.last_data = time.monotonic()
        self.lines = 0  # lines read, over every restart (truncation)
        self._restart()

    def _restart(self) -> None:
        self.scanner, self.recoder, self.head, self.last = self.matcher.scanner(self.path), Recoder(), b"", b""

    def read(self, triage: Triage, on_new: OnNew) -> bool:
        chunk = self.f.read(CHUNK)
        if not chunk:
            return False
        if len(self.head) < HEAD:
            self.head += chunk[: HEAD - len(self.head)]
        self.last, self.last_data = chunk[-1:], time.monotonic()
        feed(triage, self.scanner.feed(self.recoder.feed(chunk)), on_new)
        return True

    def drain(self, triage: Triage, on_new: OnNew) -> None:
        while self.read(triage, on_new):
            pass

    def finish(self, triage: Triage, on_new: OnNew) -> None:
        feed(triage, self.scanner.feed(self.recoder.finish()), on_new)
        feed(triage, self.scanner.finish(), on_new)
        self.lines += self.scanner.lineno - 1 + (self.last not in (b"\n", b""))

    def truncated(self) -> bool:
        """Shorter than what was read, or its first bytes are no longer the ones read."""
        fd = self.f.fileno()
        if os.fstat(fd).st_size < self.f.tell():
            return True
        return bool(self.head) and os.pread(fd, len(self.head), 0) != self.head

    def restart(self, triage: Triage, on_new: OnNew) -> None:
        self.finish(triage, on_new)
        self.f.seek(0)
        self._restart()

    def size(self) -> int:
        return os.fstat(self.f.fileno()).st_size


def follow_into(
    matcher: Matcher,
    path: str,
    triage: Triage,
    on_new: OnNew,
    notice: Callable[[str], None],
    stop: Callable[[], bool] = lambda: False,
    counted: Source | None = None,
) -> None:
    """Feed `path` into `triage` until `stop()` is true or the process is interrupted; the lines read
    are added to `counted`."""
    if os.path.isdir(path):
        raise InputError(path, "is a directory")
    try:
        is_stream = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        is_stream = False
    if is_stream:  # a FIFO or device cannot be re-read or truncated: one stream to its end
        source = Source(path)
        scan_source(matcher, source, triage, on_new)
        if counted is not None:
            counted.lines += source.lines
        if source.error:
            raise InputError(path, source.error)
        return
    gens: list[_Generation] = []  # oldest first; the last is the file now at `path`
    waited = False
    try:
        while not stop():
            _open_new(path, matcher, gens, notice)
            if not gens:
                if not waited:
                    notice(f"waiting for {path} to appear")
                    waited = True
                time.sleep(POLL)
                continue
            cur = gens[0]
            if len(gens) == 1 and cur.truncated():
                cur.restart(triage, on_new)
                notice(f"{path} was truncated; reading again from the top")
            if cur.read(triage, on_new):
                continue
            if len(gens) > 1:
                # A rotated file is done once the writer uses the new one, or after QUIET seconds.
                moved_on = gens[1].size() > 0
                cur.drain(triage, on_new)
                if moved_on or time.monotonic() - cur.last_data >= QUIET:
                    cur.finish(triage, on_new)
                    cur.f.close()
                    gens.pop(0)
                    if counted is not None:
                        counted.lines += cur.lines
                continue
            time.sleep(POLL)
        for gen in gens:
            gen.drain(triage, on_new)
    finally:
        for gen in gens:
            gen.finish(triage, on_new)
            gen.f.close()
            if counted is not None:
                counted.lines += gen.lines


def _open_new(path: str, matcher: Matcher, gens: list[_Generation], notice: Callable[[str], None]) -> None:
    """Open the file at `path` if it is a generation not seen yet."""
    ident = _identity(path)
    if ident is None or (gens and gens[-1].ident == ident):
        return
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return  # rotated away between stat and open
    except OSError as exc:
        raise InputError(path, exc.strerror.lower() if exc.strerror else str(exc)) from None
    gen = _Generation(f, matcher, path)
    if gens and gen.ident == gens[-1].ident:
        f.close()
        return
    if gens:
        notice(f"{path} was rotated; following the new file")
    if gen.ident != ident:
        notice(f"{path} was replaced more than once between two checks; lines written to the one in between may be missed")
    gens.append(gen)
