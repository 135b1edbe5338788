"""Matches: a two-stage matcher over raw bytes.

Stage one runs one multi-literal automaton (see prefilter.py) over whole chunks to find every anchor's required
literal; with Hyperscan, the lines that hold a hit then go, joined, through one database of every anchor's pattern
as a byte-level superset (superset.py), so only the anchors that may really match a line are left for it. Stage two
decodes only the lines with something left, peels their prefixes and runs those anchors' full patterns there. A
scanner remembers the lines that gave nothing by their shape (digits read as 0, where no digit can matter; else their
bytes), so a line repeated, at another time or from another rank, goes no further than stage one.
Line numbers come from counting newlines in the skipped bytes.
`\r` ends a line segment (tqdm bars) but only `\n` advances the line number, as in an editor.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sys
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import regex

from errmap import failures, gpus, readings, versions
from errmap import superset as superset_module
from errmap.kb import KB, USER_RANGE, Anchor, Entry, cache_dir, message_regex, write_cache
from errmap.failures import (ASSERTION, CAUGHT, GENERIC, GENERIC_LITERALS, GPU_ERROR, LEVEL_LITERALS, LOUD_LEVELS,
                             QUOTED, RAISED, UNGATED_LITERALS, WEAK, WEAK_LITERALS, glog_record, loud)
from errmap.lines import ANSI, PREFIX, Line, peel
from errmap.prefilter import Hyperscan, HyperscanError, build, compiles, patterns_wanted
from errmap.superset import DIGITS, Unsupported, digit_blind, superset
from errmap.stack import LITERALS as STACK_LITERALS, in_frame

MAX_LINE = 1 << 20  # longer lines are cut here; matching still runs on their start
REGEX_TIMEOUT = 0.25  # seconds; no line may hang the matcher
# Official anchors pass `errmap kb check`'s adversarial timing (a test keeps it so) and the built-in
# shapes below are linear, so they run without a timeout, which triples a regex call's cost; anchors
# from a user's KB (errno 9000-9999) keep REGEX_TIMEOUT.
MAX_TIMEOUTS = 3  # an anchor that times out on this many lines is switched off for the run
# A scanner remembers the lines that gave nothing, so that a line repeated (a warning every rank prints at every step,
# its digits read as 0) is matched once: lines of at most UNMATCHED_MAX bytes, at most UNMATCHED of them and
# UNMATCHED_BYTES in all (then it forgets them all at once).
UNMATCHED, UNMATCHED_MAX, UNMATCHED_BYTES = 4096, 2048, 1 << 20
ZEROED = bytes.maketrans(b"123456789", b"000000000")  # a line's shape: its digits read as 0

# What comes before the text GENERIC runs on, at its start: the prefixes peel takes, the blanks lstrip takes.
BEFORE_TEXT = f"(?:{PREFIX.pattern})[\\s\\x1c-\\x1f]*"
# A traceback's frame line, and what marks the start of one (IPython's names the type first).
FRAME = regex.compile(rb'File "([^"]+)", line \d+, in (\S+)')
TRACEBACK = regex.compile(rb"(?:(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Interrupt))\s+)?Traceback \(most recent call last\)")
FRAME_LITERAL, TRACEBACK_LITERAL = b'File "', b"Traceback (most recent call last)"
FRAME_WINDOW = 200  # lines: a frame rule looks this far back for the failure's traceback
# A failure line no anchor knows may be hard-wrapped (a terminal, a pasted issue, a logger's width): it is
# matched again joined with up to this many continuation lines of at most CONTINUED_MAX bytes each.
CONTINUED, CONTINUED_MAX = 3, 2048
PAD = 20
PADDED = re.compile(f" {{{PAD},}}")  # a terminal's wrap turned into blanks when a screen is copied whole

_GENERIC, _FRAME, _TRACEBACK, _GPU, _UNGATED, _VERSION = -1, -2, -3, -4, -5, -6
_STACK = -7  # _STACK - k: the k-th of stack.LITERALS
_STACKS = list(STACK_LITERALS.values())
_GENERIC_ONLY = {_GENERIC}
# "Error"/"Exception" only with the punctuation of an exception line; every other literal is telling alone.
_SHAPES = (b"Error:", b"Exception:", b"Error(", b"Exception(",
           *(lit.encode() for lit in GENERIC_LITERALS if lit not in ("Error", "Exception")))
# Two searches: the type followed by its punctuation or alone before trailing blanks (those bytes.rstrip takes) at a
# line's end, then the other shapes; the standard library's engine skips to a pattern's first bytes, and one search
# over them all would stop at every "e" of a line for "error:".
_SHAPED = re.compile(rb"E(?:rror|xception)(?:[:(]|[ \t\x0b\x0c]*$)", re.MULTILINE)
_SHAPED_REST = re.compile(b"|".join(re.escape(s) for s in _SHAPES if not s.startswith((b"Error", b"Exception"))))
# The last byte of a line that a paste may have cut (readings.cut): a word's, a comma's or a blank's.
_CUT_LIKE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_,;:- ") | frozenset(range(0x80, 0x100))


def _failure_shaped(raw: bytes) -> bool:
    """A cheap necessary condition for GENERIC: a type followed by ':' or '(', a bare type at the end, or another shape."""
    return _SHAPED.search(raw) is not None or _SHAPED_REST.search(raw) is not None


def _rereadable(raw: bytes, ids: set[int]) -> bool:
    """Whether a line no anchor matched may be read again (readings.py): it may be cut inside an anchor's message
    (an anchor's literal is here and it ends as a cut line does) or name an exception in a sentence of another
    language (it is not ASCII), and it has a failure's shape; or it is a C++ glog E/F record (failures.loud)."""
    return (not raw.isascii() or max(ids) >= 0 and raw[-1:] and raw[-1] in _CUT_LIKE) and _failure_shaped(raw) \
        or glog_record(raw)


def _joined(block: bytes | bytearray, spans: list[tuple[int, int]]) -> tuple[bytes, list[int]]:
    """The lines block[s:e] joined with newlines (none holds one), and where each line's successor starts."""
    view = memoryview(block)
    joined = b"\n".join([view[s:e] for s, e in spans])
    return joined, list(itertools.accumulate(e - s + 1 for s, e in spans))


# Where a line's text is more than a part of its bytes' decoding: an SGR code that lost its ESC is removed (`\d`
# takes any digit) and a quoted `raise X("...")` rewritten (lines.peel). A line where the supersets' database
# finds this (as the id _REWRITTEN) keeps every anchor whose literal it holds; the escapes and NUL bytes that are
# removed are removed before the supersets run (`_narrow`).
REWRITTEN = rb"raise |\[[0-9;\x80-\xff]*m"
_REWRITTEN = _STACK - len(STACK_LITERALS)  # the next free id
# A terminal's padding (PADDED) in a line's text: PAD blanks in its bytes less escapes, with the NUL bytes and lost SGR
# codes that peel removes between them. Read as one blank it may form a literal: such a line is remembered by its bytes.
_PADDED = re.compile(rb"(?: (?:\x00|\[[0-9;\x80-\xff]*m)*){%d}" % PAD)


def _raw(line: bytes | bytearray | memoryview) -> bytes:
    """A line's bytes less its escapes (ESC or C1): stripped per candidate line, as literals sit inside messages."""
    raw = bytes(line)
    return ANSI.sub(b"", raw) if b"\x1b" in raw or b"\xc2" in raw else raw


def _search(pattern: regex.Pattern[str], text: str, risky: bool) -> regex.Match[str] | None:
    # even timeout=None costs as much as a timeout: leave the argument out where none is needed
    return pattern.search(text, timeout=REGEX_TIMEOUT) if risky else pattern.search(text)


@dataclass(slots=True)
class Match:
    """An anchor of a KB entry matched one line (as printed, cut or case-folded: `exact`), or the words of its family
    did (no anchor: `likely`)."""

    entry: Entry
    anchor: Anchor | None
    line: Line
    captures: dict[str, str]
    words: tuple[str, ...] = ()  # a likely match: the hint's words found

    @property
    def confidence(self) -> str:
        return "exact" if self.anchor is not None else "likely"


@dataclass(slots=True)
class Unrecognized:
    """A line that reads like a failure but no anchor knows."""

    line: Line
    type: str
    message: str
    inner: str | None = None  # a wrapper's wrapped type: RayTaskError(KeyError) -> KeyError
    weak: bool = False  # a weak shape (failures.py): failure evidence only where nothing stronger is


@dataclass(slots=True)
class Named:
    """The first line of a source that names the stack which wrote it (stack.py)."""

    line: Line
    stack: str


@dataclass(slots=True)
class Release:
    """A line of a source that names the release of a package the run uses (versions.py); the first for each."""

    line: Line
    package: str
    version: str


@dataclass(slots=True)
class GpuNamed:
    """The first line of a source that names a GPU (gpus.py)."""

    line: Line
    name: str


Event = Match | Unrecognized | Named | GpuNamed | Release


class Matcher:
    """All anchors of a KB compiled once; `scanner()` gives per-source state."""

    def __init__(self, kb: KB, notice: Callable[[str], None] | None = None):
        self.anchors: list[tuple[Entry, Anchor]] = [(e, a) for e in kb for a in e.anchors]
        self.entries: dict[int, Entry] = {e.errno: e for e in kb}
        self.hinted = [e for e in kb if e.hints]
        self.timeouts: dict[int, int] = {}  # anchor index -> lines it timed out on
        self.off: set[int] = set()  # anchors switched off after MAX_TIMEOUTS
        self.notice = notice or _to_stderr
        literals: dict[bytes, set[int]] = {}
        for i, (_, anchor) in enumerate(self.anchors):
            for lit in anchor.literals:
                literals.setdefault(lit.encode(), set()).add(i)
        for lit in GENERIC_LITERALS:
            literals.setdefault(lit.encode(), set()).add(_GENERIC)
        for lit in UNGATED_LITERALS + LEVEL_LITERALS:
            literals.setdefault(lit.encode(), set()).add(_UNGATED)
        literals.setdefault(FRAME_LITERAL, set()).add(_FRAME)
        literals.setdefault(TRACEBACK_LITERAL, set()).add(_TRACEBACK)
        for k, lit in enumerate(STACK_LITERALS):
            literals.setdefault(lit, set()).add(_STACK - k)
        for lit in gpus.LITERALS:
            literals.setdefault(lit, set()).add(_GPU)
        for lit in versions.LITERALS:
            literals.setdefault(lit, set()).add(_VERSION)
        self.literals = list(literals)
        self.targets = [literals[lit] for lit in self.literals]
        # ids whose lines are recorded (a frame, a traceback header, a stack's or a GPU's name) whatever anchors match:
        # every stage-one id but the anchors' and GENERIC's, so `ids <= recorded` says that no anchor is left
        self.recorded = {_FRAME, _TRACEBACK, _GPU, _VERSION, *(_STACK - k for k in range(len(STACK_LITERALS)))}
        # stage-one literals that only name a stack: the first in a block names it, those after have nothing to say
        self.names = {k: _STACKS[_STACK - i] for k, (i, *more) in enumerate(self.targets) if not more and i <= _STACK}
        # stage-one literals that only name one package's release (a banner): those after the first have nothing to say
        self.releases = {k: versions.BANNERS[lit] for k, lit in enumerate(self.literals)
                         if lit in versions.BANNERS and self.targets[k] == {_VERSION}}
        # anchors whose result on a line depends on more than the line: a frame rule, a user's anchor (its timeouts count)
        self.contextual = {i for i, (e, a) in enumerate(self.anchors) if a.frames is not None or e.errno in USER_RANGE}
        self.prefilter = build(self.literals, once=frozenset(self.names) | frozenset(self.releases))
        # A line that gave nothing is remembered with every ASCII digit read as 0 (a time, a rank, a pid, a step)
        # where nothing that reads it tells one digit from another: not these anchors (superset.digit_blind), not a
        # literal with a digit in it (the literals' digits read as 0, found in the line's).
        self.digit_bound = set(self._cached("digits", self._digit_bound))
        zeroed = sorted({lit.translate(ZEROED) for lit in self.literals if any(b in DIGITS for b in lit)})
        self.digit_literals = re.compile(b"|".join(map(re.escape, zeroed))) if zeroed else None
        # The supersets: the database, the id each pattern stands for, and the ids that have one (`gate`).
        self.supersets: Hyperscan | None = None
        self.superset_ids: list[int] = []
        self.gate: set[int] = set()
        if patterns_wanted():
            self._supersets()

    def _supersets(self) -> None:
        """Every anchor's superset, and GENERIC's and GPU_ERROR's for the unknown failures; an anchor without one
        (it would match empty; Hyperscan refuses it) runs on every line holding its literal. The table is cached
        beside the KB's, keyed by what it is built from."""
        anchors = [message_regex(a.regex) for _, a in self.anchors] + [GENERIC.pattern, GPU_ERROR.pattern]
        table = self._cached("supersets", lambda: self._table(anchors, checked=False))
        try:
            self.supersets = Hyperscan([p.encode("latin-1") for p, _ in table], literal=False)
        except HyperscanError:  # find the patterns Hyperscan refuses, one by one
            table = self._table(anchors, checked=True)
            self.supersets = Hyperscan([p.encode("latin-1") for p, _ in table], literal=False)
            write_cache(self._cache_path("supersets"), json.dumps(table).encode())
        self.superset_ids = [i for _, i in table]
        self.gate = set(self.superset_ids) - {_REWRITTEN}

    @cached_property
    def _fingerprint(self) -> str:
        """What is built from the anchors depends on: their patterns and guards, and this code."""
        h = hashlib.sha256(repr(([(a.regex, a.unless) for _, a in self.anchors], BEFORE_TEXT)).encode())
        for code in (__file__, superset_module.__file__, failures.__file__):  # BEFORE_TEXT: the prefixes lines.py peels
            h.update(Path(code).read_bytes())
        return h.hexdigest()[:24]

    def _cache_path(self, name: str) -> Path:
        return cache_dir() / f"{name}-{self._fingerprint}.json"

    def _cached(self, name: str, built: Callable[[], list]) -> list:
        """A list built from the anchors, read from the cache beside the KB's, or built and written there (a
        read-only home: built each time)."""
        path = self._cache_path(name)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            value = built()
            write_cache(path, json.dumps(value).encode())
            return value

    def _digit_bound(self) -> list[int]:
        """The anchors whose pattern or guard may tell one digit from another."""
        return [i for i, (_, a) in enumerate(self.anchors)
                if not digit_blind(message_regex(a.regex)) or a.unless is not None and not digit_blind(a.unless)]

    def _table(self, patterns: list[str], checked: bool) -> list[tuple[str, int]]:
        """(Hyperscan pattern, id) for every pattern with a superset; GENERIC's two patterns stand for one id."""
        ids = list(range(len(self.anchors))) + [_GENERIC, _GENERIC]
        found: dict[int, list[str] | None] = {}
        for i, pattern in zip(ids, patterns):
            try:
                # a user's anchor runs on every line holding its literal: its regex timeouts count as before
                sup = None if i >= 0 and self.anchors[i][0].errno in USER_RANGE else \
                    superset(pattern, after=BEFORE_TEXT if pattern is GENERIC.pattern else None)
            except Unsupported:
                sup = None
            if sup is None or (checked and not compiles(sup)):
                found[i] = None  # this id runs on every line holding its literal
            elif found.get(i, []) is not None:
                found.setdefault(i, []).append(sup.decode("latin-1"))
        return [(p, i) for i, sups in found.items() if sups for p in sups] + [(REWRITTEN.decode("latin-1"), _REWRITTEN)]

    def scanner(self, path: str) -> Scanner:
        return Scanner(self, path)

    def match_line(self, line: Line, candidates: set[int], frames: Iterable[tuple[int, str]] = (),
                   breaks: tuple[int, ...] = ()) -> list[Event]:
        """Stage two: the full patterns of the anchors whose literals occur in this line, whatever
        its level; an anchor's guard (`unless`) and frame rule (`frame`, over `frames`: traceback
        frames as (line number, 'path:function  source'), those FRAME_WINDOW lines back) must agree too.
        With `breaks` (where joined continuation lines begin), a match must start before the first or span one."""
        events: list[Event] = []
        seen: set[int] = set()
        known = line.quoted  # a guarded look-alike or a quoted source line is not an unknown failure
        generic = _GENERIC in candidates and not line.quiet  # whether an unknown failure may be reported here
        for i in sorted(c for c in candidates if c >= 0):
            entry, anchor = self.anchors[i]
            if entry.errno in seen or i in self.off:
                continue
            risky = entry.errno in USER_RANGE
            if anchor.guard is not None and not risky and anchor.guard.search(line.text):
                # The guard is cheaper than the anchor: a line it matches gives no match, and whether the anchor
                # matches it too (a guarded look-alike) matters only where an unknown failure may be reported.
                known = known or generic and anchor.compiled.search(line.text) is not None
                continue
            try:
                m = _search(anchor.compiled, line.text, risky)
                if m is not None and risky and anchor.guard is not None and _search(anchor.guard, line.text, risky):
                    known = True
                    continue
            except TimeoutError:
                self._timed_out(i, line)
                continue
            if m is not None and breaks and m.start() >= breaks[0] and not any(m.start() < b < m.end() for b in breaks):
                continue  # wholly inside one continuation line: that line is matched on its own
            if m is not None and anchor.frames is not None and not any(
                n >= line.lineno - FRAME_WINDOW and anchor.frames.search(f) for n, f in frames
            ):
                continue
            if m is not None:
                seen.add(entry.errno)
                caps = {k: v for k, v in m.groupdict().items() if v is not None}
                events.append(Match(entry, anchor, line, caps))
        if not events and not known and (generic or _UNGATED in candidates):
            events += unknown(line, generic)
        return events


    def _timed_out(self, i: int, line: Line) -> None:
        self.timeouts[i] = n = self.timeouts.get(i, 0) + 1
        if n >= MAX_TIMEOUTS:
            self.off.add(i)
            entry, anchor = self.anchors[i]
            k = entry.anchors.index(anchor) + 1
            self.notice(f"anchor {k} of {entry.errno} ({entry.slug}) took over {REGEX_TIMEOUT}s on {n} lines "
                        f"(last {line.path}:{line.lineno}); it is off for the rest of this run. "
                        f"`errmap kb check` finds such patterns")


def unknown(line: Line, generic: bool = True) -> list[Unrecognized]:
    """A failure line no anchor explains, by its shape (failures.py): strong, else weak; none if it has no such shape."""
    g = None
    if generic:
        g = GENERIC.match(line.text)
        if g is None and " error: " in line.text:
            g = GPU_ERROR.search(line.text)
        if g is None and not line.text.isascii():  # an exception named inside a sentence of another language
            g = QUOTED.search(line.text)
    if g is None and not line.quiet and "Assertion " in line.text:
        g = ASSERTION.match(line.text)
    if g is not None:
        message = (g["message"] or "").strip()
        caught = CAUGHT.match(message)  # torch DataLoader: "KeyError: Caught KeyError in DataLoader worker process 0."
        return [Unrecognized(line, g["type"], message, g["inner"] or (caught and caught[1]))]
    if any(lit in line.text for lit in WEAK_LITERALS) and (w := WEAK.search(line.text)) is not None:  # at any level
        return [Unrecognized(line, w["type"], w["message"].strip(), weak=True)]
    if (level := loud(line.raw, line.level)) and line.text.strip():
        return [Unrecognized(line, level, line.text.strip(), weak=True)]
    return []


def _to_stderr(message: str) -> None:
    sys.stderr.write(f"errmap: knowledge base: {message}\n")
    sys.stderr.flush()


INHERITED = (0, b"")  # a Scanner's `_open` when it starts mid-file: whatever the bytes before left open


@dataclass
class Scanner:
    """Feeds one source's bytes, chunk by chunk, and yields its events in line order."""

    matcher: Matcher
    path: str
    lineno: int = 1  # number of the line that the next byte belongs to
    lines_cut: int = 0
    _buf: bytearray = field(default_factory=bytearray, repr=False)  # the unfinished last line, then the next chunk
    _skipping: bool = field(default=False, repr=False)
    _frames: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=64), repr=False)
    _open: tuple[int, bytes] | None = field(default=None, repr=False)  # a traceback header no failure has followed yet
    _stacks: set[str] = field(default_factory=set, repr=False)  # stacks named so far
    _gpu: bool = field(default=False, repr=False)  # whether a GPU was named yet
    _released: set[str] = field(default_factory=set, repr=False)  # packages whose release was named
    # the lines that gave nothing and recorded nothing, by their shape (digits read as 0) -> [whether one may end a
    # traceback (failure-shaped; None: not read yet), whether no digit can matter to a line of this shape (None: not
    # read yet), the bytes of the last of them]
    _unmatched: dict[bytes, list] = field(default_factory=dict, repr=False)
    _unmatched_bytes: int = field(default=0, repr=False)

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Event]:
        self.take(chunk)
        return self.match()

    def take(self, chunk: bytes | bytearray | memoryview) -> None:
        """Append a chunk (it may be a reader's reused buffer: it is copied once, here)."""
        self._buf += chunk

    def match(self) -> list[Event]:
        """Match the whole lines taken, in place; only the unfinished last line stays for the next chunk. Matching
        again after an interruption matches what was left."""
        events: list[Event] = []
        buf = self._buf
        if self._skipping:
            ends = [i for i in (buf.find(b"\n"), buf.find(b"\r")) if i >= 0]
            if not ends:
                self._drop(len(buf))
                return events
            buf = self._drop(min(ends))
            self._skipping = False
        nl = buf.rfind(b"\n")
        end = max(nl, buf.rfind(b"\r", nl + 1))
        if end >= 0:
            events += self._scan(buf, end + 1)
            buf = self._drop(end + 1)
        if len(buf) > MAX_LINE:
            events += self._scan(buf, MAX_LINE, cut=True)
            self.lines_cut += 1
            self._drop(len(buf))
            self._skipping = True
        return events

    def _drop(self, n: int) -> bytearray:
        """The buffer less its first n bytes: in place (the start of a bytearray moves, no copy of what stays), or
        a copy while the frames of a scan an interrupt ended still hold a view of it."""
        try:
            del self._buf[:n]
        except BufferError:
            self._buf = self._buf[n:]
        return self._buf

    def finish(self) -> list[Event]:
        """End of input: the last line may lack its newline; a traceback cut before its exception
        line is still a failure."""
        return self.flush() + self.ended()

    def flush(self) -> list[Event]:
        """The last line, which may lack its newline."""
        rest = bytes(self._buf)
        self._drop(len(rest))
        return self._scan(rest, len(rest)) if rest else []

    def ended(self) -> list[Event]:
        """A traceback cut before its exception line is still a failure."""
        events: list[Event] = []
        if self._open is not None and self._open is not INHERITED:
            lineno, raw = self._open
            t = TRACEBACK.search(raw)
            kind = t["type"].decode() if t["type"] else "Traceback"
            line = peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""))
            events.append(Unrecognized(line, kind, "the log ends inside a traceback, before its exception line"))
            self._open = None
        return events

    def _scan(self, block: bytes | bytearray, limit: int, cut: bool = False) -> list[Event]:
        """Match the whole lines (or one cut line) of block[:limit] and advance the line count."""
        m = self.matcher
        hits: dict[int, tuple[int, set[int]]] = {}  # line start -> (line end, anchor ids)
        s = e = -1  # the line [s, e) of the previous hit: hits come in order, so each search for a
        # line's bounds starts where the previous line ended (linear on a long line full of hits)
        targets = m.targets
        named = {pat for pat, stack in m.names.items() if stack in self._stacks}  # literals with nothing more to say
        named |= {pat for pat, package in m.releases.items() if package in self._released}
        for pat, stop in m.prefilter.hits(memoryview(block)[:limit]):
            if pat in named:
                continue
            if s < stop <= e:
                hits[s][1].update(targets[pat])
                continue
            lo = e if 0 <= e < stop else 0
            nl = block.rfind(b"\n", lo, stop)  # line breaks first, then a `\r` only after the last: each search stops soon
            s = max(nl, block.rfind(b"\r", max(lo, nl), stop)) + 1
            if s in hits:
                e = hits[s][0]
                hits[s][1].update(targets[pat])
                continue
            e = block.find(b"\n", stop, limit)
            e = limit if e < 0 else e
            r = block.find(b"\r", stop, e)
            e = r if r >= 0 else e
            hits[s] = (e, set(targets[pat]))
        # the lines that may be remembered (their bytes), and those that gave nothing before but may end a traceback
        keys = {} if cut else {s: bytes(block[s:e]) for s, (e, _) in hits.items() if e - s <= UNMATCHED_MAX}
        again: set[int] = set()
        unmatched = self._unmatched
        for s, key in keys.items() if unmatched else ():
            if (known := self._recalled(key, hits[s][1])) is None:
                continue
            if (shaped := known[0]) is None:  # read once, when the line comes again (as below)
                shaped = known[0] = _failure_shaped(_raw(key)) and (hits[s][1] != _GENERIC_ONLY or _failure_shaped(key))
            if shaped:
                again.add(s)
            else:
                del hits[s]  # nothing to do
        starts = []
        for s in sorted(hits):
            e, ids = hits[s]
            if ids == _GENERIC_ONLY and s not in again and not _failure_shaped(block[s:e]):
                self._remember(keys.get(s), False)  # "Error" inside a word or a metric name: no exception line
                continue
            starts.append(s)
        raws: dict[int, bytes] = {}  # line start -> its bytes less escapes, for the lines read so far
        narrowed = self._narrow(block, [s for s in starts if s not in again], hits, raws) if m.supersets is not None else {}
        events: list[Event] = []
        pos, lineno = 0, self.lineno
        for s in starts:
            e, ids = hits[s]
            if s in again:
                if self._open is None:
                    continue
                if m.supersets is not None:  # it may end the open traceback
                    narrowed.update(self._narrow(block, [s], hits, raws))
            tried = narrowed.get(s, ids)
            # a failure-shaped line (each shape holds one of GENERIC's literals) that no anchor's superset nor GENERIC's
            # took: read again (cut, named inside a sentence)
            left = not tried <= m.recorded  # an anchor or GENERIC is left to try after the supersets
            reread = not left and _GENERIC in ids and _rereadable(raws[s] if s in raws else _raw(block[s:e]), ids)
            if self._open is None and not left and not reread and ids.isdisjoint(m.recorded):
                self._remember(keys.get(s))
                continue  # nothing to record and no anchor left: not even its line number is needed
            lineno += block.count(b"\n", pos, s)
            pos = s
            raw = raws[s] if s in raws else _raw(block[s:e])
            if _FRAME in ids and (f := FRAME.search(raw)) is not None:
                # the quoted source line below a frame belongs to it: "path:function  source"
                nl = block.find(b"\n", e + 1, limit)
                src = bytes(block[e + 1: nl if nl >= 0 else limit]).strip()
                self._frames.append((lineno, (f[1] + b":" + f[2] + b"  " + src).decode("utf-8", "replace")))
                path = f[1].decode("utf-8", "replace")
                events += self._named(in_frame(path), lineno, raw)
                if "-" in path and (found := versions.in_path(path)) is not None:
                    events += self._release([found], lineno, raw)
            elif _TRACEBACK in ids and TRACEBACK.search(raw):
                self._open = (lineno, raw)
            for i in ids:
                if i <= _STACK:
                    events += self._named(_STACKS[_STACK - i], lineno, raw)
            if _VERSION in ids:
                events += self._release(versions.in_line(raw.decode("utf-8", "replace")), lineno, raw)
            if _GPU in ids and not self._gpu and (name := gpus.named_in(raw)) is not None:
                self._gpu = True
                events.append(GpuNamed(peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", "")), name))
            if ids <= m.recorded:
                continue  # a frame or a traceback header only: recorded, nothing to match
            line, closes = None, False  # whether this is the open traceback's exception line, known or not
            if self._open is not None and _failure_shaped(raw):
                line = peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""), cut)
                closes = not line.quoted  # a frame's quoted `raise X(` source line is not
                if closes:
                    self._open = None
            # a line whose result depends on the line alone, which may be remembered (the same bytes, or the same shape
            # where no digit can matter: the same result)
            key = None if closes or not ids.isdisjoint(m.recorded) or not tried.isdisjoint(m.contextual) else keys.get(s)
            if key is not None and self._recalled(key, ids) is not None:
                continue  # this line again: it gave nothing
            if not left and not closes and not reread:
                self._remember(key)
                continue  # no superset matched: no anchor can
            line = line or peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""), cut)
            # GENERIC's superset reads a line's start: an exception named inside a sentence is read by match_line too
            found = m.match_line(line, tried if _GENERIC in tried or _GENERIC not in ids else tried | _GENERIC_ONLY,
                                 self._frames)
            if len(found) == 1 and isinstance(found[0], Unrecognized) or not found and line.quiet and not line.quoted \
                    and _GENERIC in tried and GENERIC.match(line.text):  # a failure line, wrapped, at a quiet level
                found = self._continued(block, limit, e, line) or found
                key = None  # the lines after it had a say
            elif found and all(isinstance(f, Match) and f.entry.role == "consequence" for f in found):
                # a consequence's words may open a root cause's message that the wrap cut ("scheduler died ... /
                # (exit code: -9)"): the joined reading wins where it finds a root cause
                joined = self._continued(block, limit, e, line)
                if any(f.entry.role == "root" for f in joined):
                    found, key = joined, None
            if PADDED.search(line.text):  # read as the text it was before the wraps, which may match more precisely
                found = self._unpadded(line) or found
            # as `reread` asks it of a line that the supersets left nothing to try
            if not found and (reread or _GENERIC in ids and _rereadable(raw, ids)) \
                    or len(found) == 1 and isinstance(found[0], Unrecognized):
                found = self._reread(line, ids, found)
            if not found and closes and not line.quiet and not GENERIC.match(line.text) \
                    and (x := RAISED.search(line.text)) is not None:
                # behind a prefix nobody listed ("wandb: ", "- root - ERROR - "): the exception its traceback ends in
                found = [Unrecognized(line, x["type"], x["message"].strip(), x["inner"])]
            if found:
                self._open = None
            else:
                self._remember(key)
            events += found
        if not cut:
            self.lineno = lineno + block.count(b"\n", pos, limit)
        return events

    def _remember(self, line: bytes | None, shaped: bool | None = None) -> None:
        """A line (its bytes, None for one that cannot be remembered) that gave nothing and recorded nothing, and
        whether it may end a traceback (None: not read yet). It is kept by its shape (its digits read as 0), so that
        the same line with another time, rank or count is known when it comes, where no digit can matter (`_blind`)."""
        if line is None:
            return
        key = line.translate(ZEROED)
        self._unmatched_bytes += 2 * len(key)
        if len(self._unmatched) >= UNMATCHED or self._unmatched_bytes > UNMATCHED_BYTES:
            self._unmatched.clear()
            self._unmatched_bytes = 2 * len(key)
        known = self._unmatched.get(key)
        self._unmatched[key] = [shaped, known and known[1], line]

    def _recalled(self, line: bytes, ids: set[int]) -> list | None:
        """What is remembered of a line (its bytes and stage-one ids) that gave nothing before, if it did: the same
        bytes, or the same shape where no digit can matter."""
        known = self._unmatched.get(line.translate(ZEROED))
        return known if known is not None and (known[2] == line or self._blind(known, line, ids)) else None

    def _blind(self, known: list, line: bytes, ids: set[int]) -> bool:
        """Whether no digit can matter to a line of this shape (read once per shape): no anchor among its stage-one ids
        tells digits apart (Matcher.digit_bound), it holds no literal with a digit in it (with that digit read as 0:
        so lines of one shape hold the same literals, and have the same ids), and its text holds no terminal's
        padding (which, read as one blank, may form such a literal)."""
        if known[1] is None:
            m, shape = self.matcher, line.translate(ZEROED)
            known[1] = ids.isdisjoint(m.digit_bound) and not (m.digit_literals and m.digit_literals.search(shape)) \
                and not _PADDED.search(_raw(shape))
        return known[1]

    def _narrow(self, block: bytes, starts: list[int], hits: dict[int, tuple[int, set[int]]],
                raws: dict[int, bytes]) -> dict[int, set[int]]:
        """The ids left to try on each line whose text the supersets can read (line start -> ids): those without a
        superset and those whose superset matches. The lines' texts (the bytes of the text that their anchors run
        on, less its prefixes, unless it is rewritten) are joined and matched in one call; their bytes less escapes
        are kept in `raws`."""
        m = self.matcher
        gate = m.gate
        keys = [s for s in starts if not hits[s][1].isdisjoint(gate)]
        narrowed = {s: hits[s][1] - gate for s in keys}
        if keys:
            joined, ends = _joined(block, [(s, hits[s][0]) for s in keys])
            lines = None
            if b"\x1b" in joined or b"\xc2" in joined:  # no escape spans a line break: one call strips them all
                joined = ANSI.sub(b"", joined)
                lines = joined.split(b"\n")
            raws.update(zip(keys, lines or joined.split(b"\n")))
            if b"\x00" in joined:
                lines = [t.replace(b"\x00", b"") for t in joined.split(b"\n")]
                joined = b"\n".join(lines)
            if lines is not None:  # the lines' lengths changed
                ends = list(itertools.accumulate(len(t) + 1 for t in lines))
            for k, stop in m.supersets.hits(joined):  # no superset matches a line break
                s = keys[bisect_right(ends, stop - 1)]
                if (i := m.superset_ids[k]) == _REWRITTEN:
                    narrowed[s] |= hits[s][1]
                elif i in hits[s][1]:
                    narrowed[s].add(i)
        return narrowed

    def _release(self, found: list[tuple[str, str]], lineno: int, raw: bytes) -> list[Release]:
        new = [(p, v) for p, v in found if p not in self._released]
        if not new:
            return []
        self._released.update(p for p, _ in new)
        line = peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""))
        return [Release(line, p, v) for p, v in new]

    def _named(self, stack: str | None, lineno: int, raw: bytes) -> list[Named]:
        if stack is None or stack in self._stacks:
            return []
        self._stacks.add(stack)
        return [Named(peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", "")), stack)]

    def _continued(self, block: bytes | bytearray, limit: int, end: int, line: Line) -> list[Match]:
        """The anchors that match an unknown failure line joined with the lines that continue it (a message
        hard-wrapped at a terminal's or a paste's width) and start on that line or span a break; a continuation line
        is plain text: not empty, not a traceback frame and not a failure line of its own."""
        parts, pos = [line.text.rstrip()], end
        widths = [len(line.raw)]  # a fixed-width fold leaves every line but the last the same width
        for _ in range(CONTINUED):
            if block[pos: pos + 2] == b"\r\n" and pos + 2 <= limit:
                pos += 1
            if pos >= limit or block[pos] != 0x0A:
                break  # the block ends here, or a \r bar segment follows
            nl = block.find(b"\n", pos + 1, limit)
            raw = bytes(block[pos + 1: nl if nl >= 0 else limit]).removesuffix(b"\r")
            if not raw.strip() or len(raw) > CONTINUED_MAX or FRAME_LITERAL in raw or b"\r" in raw:
                break
            text = ANSI.sub(b"", raw).decode("utf-8", "replace")
            cont = peel(self.path, 0, text)
            if cont.actor and not line.actor and (k := text.find("(" + cont.actor)) >= 0:
                text = text[k:].strip()  # "(CPUBFloat16Type) should be ..." continues the message: no Ray prefix
            else:
                text = cont.text.strip()
            if not text or GENERIC.match(text):
                break
            parts.append(text)
            widths.append(len(raw.decode("utf-8", "replace")))
            pos = nl if nl >= 0 else limit
        if len(parts) == 1:
            return []
        folded = len(set(widths[:-1])) == 1 and widths[-1] <= widths[0]
        # wrapped between words, or folded inside one ("KV cach" / "e is needed")
        return self._rematch(line, ((glue.join(parts), tuple(itertools.accumulate(len(p) + len(glue) for p in parts[:-1])))
                                    for glue in ((" ", "") if folded else (" ",))))

    def _reread(self, line: Line, ids: set[int], found: list[Event]) -> list[Event]:
        """A failure-shaped line that no anchor matched as printed (`found`: nothing, or its unrecognized failure),
        read as people paste it (readings.py): cut inside an anchor whose literal it holds; then, where it reads as a
        failure, retyped in another case, or in the words of a family (a likely match)."""
        m = self.matcher
        hits = readings.cut([m.anchors[i] for i in sorted(ids) if i >= 0 and i not in m.off], line, self._frames, FRAME_WINDOW)
        failure = found[0] if found and isinstance(found[0], Unrecognized) else None
        if failure is None or failure.weak and failure.type not in LOUD_LEVELS:  # no failure, or a launcher's report
            return [Match(entry, anchor, line, caps) for entry, anchor, caps in hits] or found
        hits = hits or readings.folded(m.anchors, line, self._frames, FRAME_WINDOW)
        if hits:
            return [Match(entry, anchor, line, caps) for entry, anchor, caps in hits]
        text = line.text
        if failure.type == "AssertionError" and not failure.message and self._frames:
            text += " " + self._frames[-1][1].split("  ", 1)[-1]  # a bare assert: its statement is its message
        # an entry whose anchor read this line (its literal is here) and refused it is not hinted at: a look-alike
        refused = {m.anchors[i][0].errno for i in ids if i >= 0}
        if (h := readings.hinted((e for e in m.hinted if e.errno not in refused), text)) is not None:
            return [Match(h[0], None, line, {}, h[1])]
        return found

    def _unpadded(self, line: Line) -> list[Match]:
        """The anchors that match a failure line whose wraps at a terminal's width became runs of blanks (a screen
        copied whole: "must be evenly divisible      by the number"), each run read as one blank, then as none (a word
        cut at the edge)."""
        return self._rematch(line, ((PADDED.sub(glue, line.text), ()) for glue in (" ", "")))

    def _rematch(self, line: Line, texts: Iterable[tuple[str, tuple[int, ...]]]) -> list[Match]:
        """The anchors that match the first of these readings of a line's text (with the breaks where joined lines
        begin) that any anchor matches, whole, cut at its end or retyped in one case (readings.py: a wrapped paste may
        be cut or retyped too)."""
        m = self.matcher
        for text, breaks in texts:
            ids = sorted({i for pat, _ in m.prefilter.hits(text.encode()) for i in m.targets[pat] if i >= 0})
            read = replace(line, text=text)
            found = [e for e in m.match_line(read, set(ids), self._frames, breaks) if isinstance(e, Match)]
            found = found or [Match(entry, anchor, read, caps) for entry, anchor, caps in
                              readings.cut([m.anchors[i] for i in ids if i not in m.off], read, self._frames, FRAME_WINDOW)
                              or readings.folded(m.anchors, read, self._frames, FRAME_WINDOW)]
            if found:
                return found
        return []


def scan_chunks(matcher: Matcher, path: str, chunks: Iterable[bytes]) -> Iterator[Event]:
    scanner = matcher.scanner(path)
    for chunk in chunks:
        yield from scanner.feed(chunk)
    yield from scanner.finish()
