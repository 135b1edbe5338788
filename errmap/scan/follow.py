"""Following a file like `tail -F`: wait for it, hold partial lines, survive rotation and truncation.

A reader thread checks the path every 20 ms while data comes (every 0.2 s when quiet) and reads
ahead of the scanner into a bounded backlog, so a burst the scanner is slow to match is already in
memory when the file is truncated or replaced. Every generation of the file (each new inode at the path) is opened as soon as it is seen
and kept open until it is read to the end: a renamed or deleted file is drained until the writer
has moved to the new one (the new one has data) or it stays quiet for QUIET seconds. Truncation
(copytruncate) is seen by size and by the first bytes, or the bytes just before the read offset,
changing, even when a burst has already grown the file past that offset; what was written before it
and not read yet is read from the rotated copy beside the file when there is one, and counted in a
warning when there is not. A gap between two checks long enough to hide a whole generation is
warned about too. The calling thread scans: each generation gets its own scanner, so line numbers
always match the file as it is on disk. A FIFO is read as one stream; one that replaces the file later is
not opened (an open would wait for its writer): the file read so far is read on, and a regular file at the path is
followed again.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import BinaryIO

from errmap.report.i18n import _
from errmap.scan import events
from errmap.scan.matcher import Matcher
from errmap.scan.scanner import Scanner
from errmap.scan.parallel import OnNew, feed, scan_source
from errmap.scan.source import CHUNK, InputError, Recoder, Source
from errmap.scan.triage import Triage

POLL = 0.02, 0.2  # seconds between checks of the path right after data came, and at most when it is quiet
QUIET = 1.0  # seconds a rotated file must stay quiet before it counts as finished
STALL = 1.0  # seconds between two checks after which a file created and removed in between may be missed
HEAD = 1024  # bytes kept from the top of a generation to recognize it after a copytruncate
TAIL = 64  # bytes kept from just before the read offset, to the same end
BACKLOG = 32 << 20  # bytes read ahead of the scanner at most
MAX_OPEN = 256  # generations held open while the scanner catches up
SIBLINGS = 1000  # directory entries looked at for the rotated copy of a truncated file

# What the reader tells the scanner, in order: ("data", generation, bytes), ("restart", generation,
# None) after a truncation, ("end", generation, None), ("notice", None, text), ("error", None, InputError).
Event = tuple[str, int | None, object]
Echo = Callable[[bytes], None]


class _Backlog:
    """Events from the reader to the scanner; `room` says whether the reader may read more."""

    def __init__(self) -> None:
        self._items: deque[Event] = deque()
        self._bytes = 0
        self._ready = threading.Condition()

    def put(self, kind: str, gen: int | None, payload: object = None) -> None:
        with self._ready:
            self._items.append((kind, gen, payload))
            self._bytes += len(payload) if isinstance(payload, bytes) else 0
            self._ready.notify()

    def get(self, timeout: float) -> Event | None:
        with self._ready:
            if not self._items:
                self._ready.wait(timeout)
            if not self._items:
                return None
            item = self._items.popleft()
            self._bytes -= len(item[2]) if isinstance(item[2], bytes) else 0
            return item

    def room(self) -> bool:
        return self._bytes < BACKLOG


class _File:
    """One open generation of the followed path, as the reader sees it."""

    def __init__(self, f: BinaryIO, key: int):
        st = os.fstat(f.fileno())
        self.f, self.key, self.ident = f, key, (st.st_dev, st.st_ino)
        self.offset, self.seen = 0, 0  # bytes read; the largest size seen
        self.head, self.tail = b"", b""
        self.last_data = time.monotonic()

    def size(self) -> int:
        return os.fstat(self.f.fileno()).st_size

    def read(self) -> bytes:
        data = os.pread(self.f.fileno(), CHUNK, self.offset)
        if data:
            self.offset += len(data)
            if len(self.head) < HEAD:
                self.head += data[: HEAD - len(self.head)]
            self.tail = (self.tail + data)[-TAIL:]
            self.last_data = time.monotonic()
        return data

    def truncated(self) -> bool:
        """Shorter than what was read, or the bytes at its top or before the offset are not the ones read."""
        fd = self.f.fileno()
        size = self.size()
        if (size < self.offset or os.pread(fd, len(self.head), 0) != self.head
                or os.pread(fd, len(self.tail), self.offset - len(self.tail)) != self.tail):
            return True
        self.seen = max(self.seen, size)
        return False

    def restart(self) -> None:
        self.offset = self.seen = 0
        self.head = self.tail = b""


class _Reader(threading.Thread):
    """Watches `path` and reads every generation of it, oldest first, into the backlog."""

    def __init__(self, path: str, backlog: _Backlog):
        super().__init__(name="errmap-follow", daemon=True)
        self.path, self.backlog = path, backlog
        self.stopping = threading.Event()
        self.files: list[_File] = []  # oldest first; the last is the file now at the path
        self.keys = 0
        self.checked = self.gap = 0.0  # when the path was last checked; the time between the last two checks
        self.full = False  # whether MAX_OPEN files are open
        self.refused: tuple[int, int] | None = None  # the FIFO, socket or device at the path, already noticed

    def run(self) -> None:
        try:
            waited, pause = False, POLL[0]
            while not self.stopping.is_set():
                self._watch()
                if not self.files and not waited:
                    self.backlog.put("notice", None, _("waiting for {path} to appear").format(path=self.path))
                    waited = True
                if self.files and self._step():
                    pause = POLL[0]
                else:  # checks slow down while nothing happens
                    self.stopping.wait(pause)
                    pause = min(pause * 1.5, POLL[1])
        except InputError as exc:
            self.backlog.put("error", None, exc)
        except OSError as exc:  # the file cannot be read any more (an I/O error, a lost mount)
            self.backlog.put("error", None, InputError(self.path, exc.strerror.lower() if exc.strerror else str(exc)))
        finally:
            for file in self.files:
                file.f.close()

    def _watch(self) -> None:
        """Open the file at the path if it is a generation not seen yet."""
        now = time.monotonic()
        self.gap, self.checked = (now - self.checked if self.checked else 0.0), now
        try:
            st = os.stat(self.path)
        except OSError:
            return
        ident = st.st_dev, st.st_ino
        if self.files and self.files[-1].ident == ident:
            return
        if stat.S_ISDIR(st.st_mode):
            raise InputError(self.path, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            if ident != self.refused:
                self.refused = ident
                self.backlog.put("notice", None, (
                    _("{path} is not a regular file (a FIFO, socket or device): errmap does not open it, reads on any "
                      "file it had open there, and follows the path again once a regular file is there")
                    .format(path=self.path)))
            return
        if len(self.files) >= MAX_OPEN:  # the scanner is far behind: the new file waits, still at the path
            if not self.full:
                self.backlog.put("notice", None, (
                    _("errmap is {n} files of {path} behind; a file removed before it is opened is missed")
                    .format(n=MAX_OPEN, path=self.path)))
            self.full = True
            return
        self.full = False
        try:  # never waits: a FIFO put there since the stat opens at once, and is closed again
            f = open(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY), "rb", buffering=0)
        except FileNotFoundError:
            return  # rotated away between stat and open
        except OSError as exc:
            raise InputError(self.path, exc.strerror.lower() if exc.strerror else str(exc)) from None
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the stat: the next check tells
            f.close()
            return
        file = _File(f, self.keys)
        if self.files and file.ident == self.files[-1].ident:
            f.close()
            return
        self.keys += 1
        if self.files:
            self.backlog.put("notice", None, _("{path} was rotated; following the new file").format(path=self.path))
            if self.gap > STALL:
                self.backlog.put("notice", None, (
                    _("{path} was replaced while errmap did not look at it for {seconds} s; a file created and "
                      "removed again in that time would have been missed").format(path=self.path, seconds=f"{self.gap:.1f}")))
        if file.ident != ident:
            self.backlog.put("notice", None, (
                _("{path} was replaced more than once between two checks; lines written to the one in between may "
                  "be missed").format(path=self.path)))
        self.files.append(file)

    def _step(self) -> bool:
        """Read the oldest open generation once; False when there was nothing to read."""
        if not self.backlog.room():
            return False
        cur = self.files[0]
        if len(self.files) == 1 and cur.truncated():
            self.backlog.put("notice", None, _("{path} was truncated; reading again from the top").format(path=self.path))
            self._recover(cur)
            cur.restart()
            self.backlog.put("restart", cur.key)
        moved_on = len(self.files) > 1 and self.files[1].size() > 0
        data = cur.read()
        if data:
            self.backlog.put("data", cur.key, data)
            return True
        if len(self.files) > 1 and (moved_on or time.monotonic() - cur.last_data >= QUIET):
            cur.f.close()
            self.files.pop(0)
            self.backlog.put("end", cur.key)
            return True
        return False

    def _recover(self, cur: _File) -> None:
        """Read what was written before a truncation and not read yet from the copy made of the file
        (logrotate's copytruncate), or say how much was lost."""
        copy = _copy_of(self.path, cur) if cur.head else None
        if copy is None:
            if cur.seen > cur.offset:
                self.backlog.put("notice", None, (
                    _("{path} was truncated before errmap read its last {n} bytes, and no copy of it was found "
                      "beside it: the lines in them are missed").format(path=self.path, n=cur.seen - cur.offset)))
            elif self.gap > STALL:
                self.backlog.put("notice", None, (
                    _("{path} was truncated while errmap did not look at it for {seconds} s, and no copy of it was "
                      "found beside it: lines written in that time may be missed")
                    .format(path=self.path, seconds=f"{self.gap:.1f}")))
            return
        try:
            with open(copy, "rb", buffering=0) as f:
                start, end = cur.offset, min(os.fstat(f.fileno()).st_size, cur.offset + BACKLOG)
                while start < end and (data := os.pread(f.fileno(), min(CHUNK, end - start), start)):
                    self.backlog.put("data", cur.key, data)
                    start += len(data)
                left = os.fstat(f.fileno()).st_size - start
        except OSError:
            return  # the copy went away (compressed, rotated on): what was read of it stays
        if start > cur.offset or left > 0:
            self.backlog.put("notice", None, (
                _("read the last {n} bytes written before the truncation from {copy}")
                .format(n=start - cur.offset, copy=copy)
                + (_("; {n} more were not read (errmap was too far behind)").format(n=left) if left > 0 else "")))


def _copy_of(path: str, cur: _File) -> str | None:
    """The newest plain file beside `path` that starts with what `cur` read and holds the bytes it read
    last at the same place: the copy a copytruncate made."""
    folder = os.path.dirname(path) or "."
    best: tuple[float, str] | None = None
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= SIBLINGS:
                    break
                try:
                    if entry.inode() == cur.ident[1] or not entry.is_file() or entry.stat().st_size < cur.offset:
                        continue
                    with open(entry.path, "rb", buffering=0) as f:
                        fd = f.fileno()
                        same = (os.pread(fd, len(cur.head), 0) == cur.head
                                and os.pread(fd, len(cur.tail), cur.offset - len(cur.tail)) == cur.tail)
                    mtime = entry.stat().st_mtime
                except OSError:
                    continue
                if same and (best is None or mtime > best[0]):
                    best = (mtime, entry.path)
    except OSError:
        return None
    return best[1] if best else None


class _Scan:
    """The scanning side of one generation: its scanner, recoder, and bytes and lines counted over restarts; what
    it scans goes to `echo` first. Interrupted, it loses nothing it took: `finish` matches it."""

    def __init__(self, matcher: Matcher, path: str, echo: Echo | None):
        self.matcher, self.path, self.echo = matcher, path, echo
        self.bytes = self.lines = 0
        self._start()

    def _start(self) -> None:
        self.scanner, self.recoder, self.last = Scanner(self.matcher, self.path), Recoder(), b""
        self.found: Iterator[events.Event] = iter(())  # what an interrupt while printing a diagnosis left

    def _take(self, text: bytes) -> None:
        self.scanner.take(text)  # before the echo: an interrupt once it is echoed cannot lose it
        self.bytes += len(text)
        if text and self.echo is not None:
            self.echo(text)

    def feed(self, data: bytes, triage: Triage, on_new: OnNew) -> None:
        self.last = data[-1:]
        self._take(self.recoder.feed(data))
        self.found = iter(self.scanner.match())
        feed(triage, self.found, on_new)

    def finish(self, triage: Triage, on_new: OnNew) -> None:
        feed(triage, self.found, on_new)
        self._take(self.recoder.finish())
        feed(triage, self.scanner.match(), on_new)
        feed(triage, self.scanner.finish(), on_new)
        self.lines += self.scanner.lineno - 1 + (self.last not in (b"\n", b""))

    def restart(self, triage: Triage, on_new: OnNew) -> None:
        self.finish(triage, on_new)
        self._start()


def _add(counted: Source | None, bytes_read: int, lines: int) -> None:
    if counted is not None:
        counted.bytes_read += bytes_read
        counted.lines += lines


def follow_into(
    matcher: Matcher,
    path: str,
    triage: Triage,
    on_new: OnNew,
    notice: Callable[[str], None],
    counted: Source | None = None,
    echo: Echo | None = None,
) -> None:
    """Feed `path` into `triage` until the process is interrupted, passing what is read to `echo` first; what
    was read by then is scanned, and the bytes and lines read are added to `counted`."""
    if os.path.isdir(path):
        raise InputError(path, "is a directory")
    try:
        is_stream = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        is_stream = False
    if is_stream:  # a FIFO or device cannot be re-read or truncated: one stream to its end
        source = Source(path)
        try:
            scan_source(matcher, source, triage, on_new, echo)
        finally:  # interrupted too: scan_source has counted what it read
            _add(counted, source.bytes_read, source.lines)
        if source.error:
            raise InputError(path, source.error)
        return
    backlog = _Backlog()
    reader = _Reader(path, backlog)
    scans: dict[int, _Scan] = {}

    def handle(event: Event) -> None:
        kind, key, payload = event
        if kind == "notice":
            notice(str(payload))
        elif kind == "error":
            raise payload  # type: ignore[misc]
        elif kind == "data":
            if key not in scans:
                scans[key] = _Scan(matcher, path, echo)
            scans[key].feed(payload, triage, on_new)  # type: ignore[arg-type]
        elif key in scans:
            if kind == "restart":
                scans[key].restart(triage, on_new)
            else:  # end
                scan = scans.pop(key)
                scan.finish(triage, on_new)
                _add(counted, scan.bytes, scan.lines)

    reader.start()
    try:
        while True:  # waits that end, as a signal may reach the reader thread and leave this one asleep
            if (event := backlog.get(POLL[1])) is not None:
                handle(event)
    finally:
        reader.stopping.set()
        reader.join()
        try:
            while (event := backlog.get(0)) is not None:  # what was read is scanned
                if event[0] != "error":
                    handle(event)
        finally:
            for scan in scans.values():
                scan.finish(triage, on_new)
                _add(counted, scan.bytes, scan.lines)
