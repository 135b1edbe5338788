"""Scanning: sources through the matcher into one triage, as a report.

With several cores (`-j N`, ERRMAP_JOBS; all of them by default) the work goes to forked worker
processes: a large plain file is split into byte ranges at line boundaries, other files are scanned
whole, one per task. Events come back in source and line order with line numbers made absolute, so
the report is the one a single process gives. Stdin, and any input when only one core is used,
stay in this process. No signal leaves a worker behind: Ctrl-C ends the pool as a KeyboardInterrupt, and
SIGTERM or SIGHUP end the workers first, then errmap as the signal would have.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from errmap.scan.matcher import FRAME_WINDOW, Matcher
from errmap.scan.scanner import INHERITED, Scanner
from errmap.scan.events import Event, Match, Unrecognized
from errmap.report.contract import Report
from errmap.scan.source import CHUNK, DOCKER_JSON, InputError, Source
from errmap.scan.triage import MAX_RESIDUE, Again, Incident, Residue, Triage, kept, clip, digest, residue_key

OnNew = Callable[[Incident | Residue], None]

PARALLEL_MIN = 16 << 20  # bytes of files below which forking workers costs more than it saves
SPLIT_MIN = 64 << 20  # a plain file this large is split into byte ranges
LEAD_MAX = 8 << 20  # bytes a worker may re-read before its range (FRAME_WINDOW lines) for the scanner's state
# What source.py decodes rather than passes through (compressed data, UTF-16/32, BOMs): never split.
_ENCODED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd", b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf", DOCKER_JSON)


def feed(triage: Triage, events: Iterable[Event], on_new: OnNew | None = None) -> None:
    for event in events:
        new = triage.add(event)
        if new is not None and on_new is not None:
            on_new(new)


def scan_source(matcher: Matcher, source: Source, triage: Triage, on_new: OnNew | None = None,
                echo: Callable[[bytes], None] | None = None) -> None:
    """Stream one source into the triage (passing each chunk to `echo` first); record an input error on the
    source instead of raising. Interrupted, it still reads the unfinished last line and counts the lines."""
    scanner = Scanner(matcher, source.path)
    last, unread = b"\n", None
    events: Iterator[Event] = iter(())
    try:
        for chunk in source.chunks():
            unread, last = chunk, bytes(chunk[-1:]) or last
            if echo is not None:
                echo(chunk)
            scanner.take(chunk)
            unread = None
            events = iter(scanner.match())
            feed(triage, events, on_new)
    except InputError as exc:
        source.error = exc.reason
    finally:
        feed(triage, events, on_new)  # what an interrupt while printing a diagnosis left of the chunk's events
        if unread is not None:  # interrupted between reading a chunk and taking it
            scanner.take(unread)
        feed(triage, scanner.match(), on_new)  # what was taken and not matched yet
        feed(triage, scanner.finish(), on_new)
        source.lines = scanner.lineno - (1 if last in (b"\n", b"") else 0)


def _events(matcher: Matcher, source: Source) -> Iterator[Event]:
    """One source's events as they are found (a worker collects them)."""
    scanner = Scanner(matcher, source.path)
    last = b"\n"
    try:
        for chunk in source.chunks():
            last = bytes(chunk[-1:]) or last
            yield from scanner.feed(chunk)
    except InputError as exc:
        source.error = exc.reason
    yield from scanner.finish()
    source.lines = scanner.lineno - (1 if last in (b"\n", b"") else 0)


def jobs(requested: int | None = None) -> int:
    n = requested or int(os.environ.get("ERRMAP_JOBS") or 0)
    if n <= 0:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return n


def scan(matcher: Matcher, sources: list[Source], errors: list[InputError], n_jobs: int | None = None,
         triage: Triage | None = None) -> Report:
    """The sources scanned into `triage` (a new one by default) with `n_jobs` worker processes, as a report."""
    triage = triage if triage is not None else Triage(runs={s.path: s.run for s in sources})
    n = jobs(n_jobs)
    sizes = [_plain_size(s.path) for s in sources]
    if n > 1 and sum(x or 0 for x in sizes) >= PARALLEL_MIN and "fork" in multiprocessing.get_all_start_methods():
        _scan_parallel(matcher, sources, sizes, triage, n)
    else:
        for source in sources:
            scan_source(matcher, source, triage)
    errors = errors + [InputError(s.path, s.error) for s in sources if s.error]
    return Report(sources, triage, errors)


def _plain_size(path: str) -> int | None:
    """The size of a regular file whose bytes are scanned as they are; None for anything else."""
    try:
        if path == "-" or not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            head = f.read(4096)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    return None if head.startswith(_ENCODED) or b"\x00" in head else size


# --- worker processes ---------------------------------------------------------------------------

_matcher: Matcher | None = None  # set before forking: workers inherit the compiled matcher


@dataclass
class _Part:
    """What a worker found in one file or byte range, with line numbers relative to its start."""

    events: list[tuple]
    newlines: int = 0
    inherited: bool = True  # nothing in the range opened or closed a traceback header
    open: tuple[int, bytes] | None = None
    source: Source | None = None  # a whole file's source, with what reading it found


class _Packer:
    """Events as a worker sends them, bounded as a triage keeps them: lines, messages and captures cut to what it
    keeps, and an unrecognized record's repeats (or any record past the first MAX_RESIDUE of this part, which no
    triage keeps unless an earlier part sent it) by its key's digest alone; line numbers relative to the part."""

    def __init__(self, matcher: Matcher, shift: int):
        self.index = {id(a): i for i, (_, a) in enumerate(matcher.anchors)}
        self.shift = shift
        self.sent: set[tuple[str, str]] = set()
        self.items: list[tuple] = []
        self.again = bytearray()  # the Again lines since the last other event

    @property
    def out(self) -> list[tuple]:
        self._flush()
        return self.items

    def _flush(self) -> None:
        if self.again:
            self.items.append((Again(bytes(self.again)),))
            self.again.clear()

    def _put(self, item: tuple) -> None:
        self._flush()
        self.items.append(item)

    def add(self, events: list[Event]) -> None:
        for line in {id(ev.line): ev.line for ev in events}.values():  # events of one line share it
            line.lineno -= self.shift
        for ev in events:
            if isinstance(ev, Match) and ev.anchor is None:  # a likely match: sent by its code and words
                self._put((ev.entry.errno, kept(ev.line), ev.words, None))
            elif isinstance(ev, Match):
                self._put((self.index[id(ev.anchor)], kept(ev.line), {k: clip(v) for k, v in ev.captures.items()}))
            elif isinstance(ev, Unrecognized):
                key = residue_key(ev)
                if key in self.sent or len(self.sent) >= MAX_RESIDUE:
                    self.again += digest(key) + min(ev.line.repeat, 0xFFFFFFFF).to_bytes(4, "little")
                else:
                    self.sent.add(key)
                    self._put((Unrecognized(kept(ev.line), clip(ev.type), clip(ev.message), ev.inner and clip(ev.inner), ev.weak),))
            else:
                self._put((ev,))


def _unpack(matcher: Matcher, packed: list[tuple], offset: int) -> Iterator[Event]:
    moved: set[int] = set()
    for item in packed:
        if len(item) == 1:
            ev = item[0]
        elif len(item) == 4:
            ev = Match(matcher.entries[item[0]], None, item[1], {}, item[2])
        else:
            entry, anchor = matcher.anchors[item[0]]
            ev = Match(entry, anchor, item[1], item[2])
        if isinstance(ev, Again):
            yield ev
            continue
        if id(ev.line) not in moved:  # events of one line share it (unpickled as one object too)
            moved.add(id(ev.line))
            ev.line.lineno += offset
        yield ev


def _whole(path: str) -> _Part:
    assert _matcher is not None
    source = Source(path)
    packer = _Packer(_matcher, 0)
    for ev in _events(_matcher, source):
        packer.add([ev])
    return _Part(packer.out, source=source)


def _range(task: tuple[str, int, int, int, bool]) -> _Part:
    """Scan [start, end) of a file after re-reading [lead, start) for the scanner's state (recent
    traceback frames, an open traceback). Reads follow the CHUNK grid of a serial read, so every
    block the scanner sees ends where a serial scan's does."""
    assert _matcher is not None
    path, lead, start, end, last = task
    scanner = Scanner(_matcher, path)
    scanner._open = INHERITED
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    skip = 0
    packer: _Packer | None = None  # made once the lead-in is read: its newlines are the shift
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = lead
        while pos < end:
            stop = min((pos // CHUNK + 1) * CHUNK, end, start if pos < start else end)
            n = os.preadv(fd, [view[: stop - pos]], pos)
            if n <= 0:
                break
            if pos < start:
                skip += buf.count(b"\n", 0, n)
                scanner.feed(view[:n])  # the lead-in: state only, its events belong to the range before
            else:
                packer = packer or _Packer(_matcher, skip)
                packer.add(scanner.feed(view[:n]))
            pos += n
    finally:
        os.close(fd)
    packer = packer or _Packer(_matcher, skip)
    if last:
        packer.add(scanner.flush())
    part = _Part(packer.out, scanner.lineno - 1 - skip)
    if scanner._open is not INHERITED:
        part.inherited = False
        if scanner._open is not None:
            part.open = (scanner._open[0] - skip, scanner._open[1])
    return part


def _work(task: tuple) -> _Part:
    return _whole(task[0]) if len(task) == 1 else _range(task)


def _line_start_before(fd: int, grid: int) -> int | None:
    """1 + the last newline in the CHUNK before `grid`: a serial scan's block ends there."""
    data = os.pread(fd, CHUNK, grid - CHUNK)
    i = data.rfind(b"\n")
    return None if i < 0 else grid - CHUNK + i + 1


def _lead(fd: int, start: int) -> int | None:
    """A serial scan's block end more than FRAME_WINDOW lines before `start` (or the file's start); None when that is
    more than LEAD_MAX bytes back (lines that long: a worker would re-read more than it scans)."""
    grid = start // CHUNK * CHUNK
    while grid >= CHUNK:
        if start - grid > LEAD_MAX:
            return None
        b = _line_start_before(fd, grid)
        if b is not None and b < start and os.pread(fd, start - b, b).count(b"\n") > FRAME_WINDOW:
            return b
        grid -= CHUNK
    return 0 if start <= LEAD_MAX else None


def _ranges(path: str, size: int, n: int) -> list[tuple]:
    """Byte ranges of about size/n, each with the lead-in a worker re-reads before it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        cuts = [0]
        for k in range(1, n):
            grid = max(CHUNK, size * k // n // CHUNK * CHUNK)
            while grid < size and (b := _line_start_before(fd, grid)) is None:
                grid += CHUNK
            if grid < size and b > cuts[-1]:
                cuts.append(b)
        leads = [0] + [_lead(fd, c) for c in cuts[1:]]
        cuts = [c for c, lead in zip(cuts, leads) if lead is not None] + [size]  # no cut where the lead-in is too long
        leads = [lead for lead in leads if lead is not None]
        return [(path, leads[i], cuts[i], cuts[i + 1], i == len(cuts) - 2) for i in range(len(cuts) - 1)]
    finally:
        os.close(fd)


def _scan_parallel(matcher: Matcher, sources: list[Source], sizes: list[int | None], triage: Triage, n: int) -> None:
    global _matcher
    plan: list[list[tuple]] = []
    for source, size in zip(sources, sizes):
        if source.path == "-":
            plan.append([])
        elif size is not None and size >= SPLIT_MIN:
            try:
                plan.append(_ranges(source.path, size, max(n, min(4 * n, size // SPLIT_MIN * 4))))
            except OSError:
                plan.append([(source.path,)])
        else:
            plan.append([(source.path,)])
    _matcher = matcher
    with _pool(n) as pool:
        results = pool.imap(_work, [t for tasks in plan for t in tasks])
        for source, tasks in zip(sources, plan):
            if not tasks:
                scan_source(matcher, source, triage)
            elif len(tasks[0]) == 1:
                part = next(results)
                assert part.source is not None
                source.bytes_read, source.lines = part.source.bytes_read, part.source.lines
                source.warning, source.error = part.source.warning, part.source.error
                feed(triage, _unpack(matcher, part.events, 0))
            else:
                feed(triage, _merge(matcher, source, (next(results) for _ in tasks)))
    _matcher = None


ENDING = (signal.SIGTERM, signal.SIGHUP)  # what ends errmap at once; SIGINT is a KeyboardInterrupt, which ends a pool


class _Ended(Exception):
    """SIGTERM or SIGHUP while workers run: raised where errmap is, so that leaving the pool ends them."""

    def __init__(self, signum: int):
        self.signum = signum


def _end(signum: int, _frame: object) -> None:
    for s in ENDING:  # one more while the workers are ended must not cut that short
        if signal.getsignal(s) is _end:
            signal.signal(s, signal.SIG_IGN)
    raise _Ended(signum)


def _worker_start(caught: list[int]) -> None:
    """A worker keeps the default action of the signals errmap catches (Pool.terminate sends SIGTERM)."""
    for s in caught:
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)


@contextmanager
def _pool(n: int) -> Iterator[multiprocessing.pool.Pool]:
    """Forked workers that no signal leaves behind. SIGTERM and SIGHUP (where they have their default action) are held
    while the workers fork, then caught: the workers are ended and errmap ends by the signal, as it would have."""
    main = threading.current_thread() is threading.main_thread()
    caught = [s for s in ENDING if main and signal.getsignal(s) is signal.SIG_DFL]
    previous = {s: signal.signal(s, _end) for s in caught}
    signal.pthread_sigmask(signal.SIG_BLOCK, caught)
    try:
        with multiprocessing.get_context("fork").Pool(n, initializer=_worker_start, initargs=(caught,)) as pool:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)
            yield pool
    except _Ended as exc:  # leaving the pool has ended its workers
        signal.signal(exc.signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [exc.signum])
        os.kill(os.getpid(), exc.signum)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)
        for s, handler in previous.items():
            signal.signal(s, handler)


def _merge(matcher: Matcher, source: Source, parts: Iterable[_Part]) -> Iterator[Event]:
    """The events of a file's ranges in order, then what a serial scan's end of input adds."""
    offset = 0
    scanner = Scanner(matcher, source.path)
    for part in parts:
        yield from _unpack(matcher, part.events, offset)
        if not part.inherited:
            scanner._open = None if part.open is None else (part.open[0] + offset, part.open[1])
        offset += part.newlines
    yield from scanner.ended()
    source.bytes_read = os.path.getsize(source.path)
    with open(source.path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        ends_in_newline = f.read(1) == b"\n"
    source.lines = offset + (0 if ends_in_newline else 1)
