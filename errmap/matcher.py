"""Matches: a two-stage matcher over raw bytes.

Stage one runs one multi-literal automaton (see prefilter.py) over whole chunks to find every anchor's required
literal; stage two decodes only the lines that hold a hit, peels their prefixes and runs the
anchors' full patterns there. Line numbers come from counting newlines in the skipped bytes.
`\r` ends a line segment (tqdm bars) but only `\n` advances the line number, as in an editor.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import regex

from errmap.kb import KB, Anchor, Entry
from errmap.lines import ANSI, Line, peel
from errmap.prefilter import build

MAX_LINE = 1 << 20  # longer lines are cut here; matching still runs on their start
REGEX_TIMEOUT = 0.25  # seconds; no line may hang the matcher
MAX_TIMEOUTS = 3  # an anchor that times out on this many lines is switched off for the run

# Lines that look like a failure even when no anchor knows them: the last line of a Python
# traceback, a C++ terminate, a fatal interpreter error, a process killed by a signal (as the shell,
# the interpreter or torchrun reports it), a compiler's fatal error, a tool's "name: ERROR" line, NCCL's
# report of a failed system or CUDA call (SYSCHECK/CUDACHECK in its checks.h; other NCCL WARN lines also come at a
# clean exit, when the proxy service thread closes its connections).
GENERIC_LITERALS = ["Error", "Exception", "terminate called after", "Fatal Python error", "core dumped",
                    "Segmentation fault", "Bus error", "Illegal instruction", "Received signal", ") received by PID",
                    "fatal error:", ": ERROR ", "CUDA error: ", "HIP error: ", "NCCL WARN "]
GENERIC = regex.compile(
    r"^(?:(?:[A-Za-z_]\w*\.)*(?P<type>[A-Z]\w*(?:Error|Exception))(?:\((?P<inner>[\w.]+)\))?(?::\s?(?P<message>.*))?"
    r"|(?P<type>terminate) called after throwing an instance of '(?P<message>[^']+)'.*"
    r"|(?P<type>Fatal Python error): (?P<message>.*)"
    r"|(?:\S+: (?:line \d+: +)?\d+ +)?(?P<type>Segmentation fault|Bus error|Illegal instruction|Aborted|Floating point exception)"
    r"(?P<message>(?: +\(core dumped\))?.*)"
    r"|(?P<type>Signal \d+ \(SIG[A-Z]+\)) received by PID (?P<message>\d+)"
    r"|\*\*\* (?P<type>Received signal \d+) \*\*\*(?P<message>.*)"
    r"|\S+:\d+:(?:\d+:)? (?P<type>fatal error): (?P<message>.*)"
    r"|(?P<type>[a-z][\w-]*): ERROR (?P<message>.+)"
    r"|(?:\S+:\d+ )?(?P<type>NCCL WARN) (?P<message>(?:Call to \S+ failed ?:|Cuda failure|HIP failure) .+))$"
)
# A CUDA/HIP error no anchor knows, wherever it sits (NCCL's watchdog quotes it mid-line).
GPU_ERROR = regex.compile(r"\b(?P<type>CUDA error|HIP error)(?P<inner>): (?P<message>.+)$")
# A traceback's frame line, and what marks the start of one (IPython's names the type first).
FRAME = regex.compile(rb'File "([^"]+)", line \d+, in (\S+)')
TRACEBACK = regex.compile(rb"(?:(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Interrupt))\s+)?Traceback \(most recent call last\)")
FRAME_LITERAL, TRACEBACK_LITERAL = b'File "', b"Traceback (most recent call last)"
FRAME_WINDOW = 200  # lines: a frame rule looks this far back for the failure's traceback

CAUGHT = regex.compile(r"Caught (\w+) in ")
_GENERIC, _FRAME, _TRACEBACK = -1, -2, -3
_GENERIC_ONLY = {_GENERIC}
# "Error"/"Exception" only with the punctuation of an exception line; every other literal is telling alone.
_SHAPES = (b"Error:", b"Exception:", b"Error(", b"Exception(",
           *(lit.encode() for lit in GENERIC_LITERALS if lit not in ("Error", "Exception")))


def _failure_shaped(raw: bytes) -> bool:
    """A cheap necessary condition for GENERIC: a type followed by ':' or '(', or a bare type at the end."""
    return any(x in raw for x in _SHAPES) or raw.rstrip().endswith((b"Error", b"Exception"))


@dataclass(slots=True)
class Match:
    """An anchor of a KB entry matched one line."""

    entry: Entry
    anchor: Anchor
    line: Line
    captures: dict[str, str]


@dataclass(slots=True)
class Unrecognized:
    """A line that reads like a failure but no anchor knows."""

    line: Line
    type: str
    message: str
    inner: str | None = None  # a wrapper's wrapped type: RayTaskError(KeyError) -> KeyError


Event = Match | Unrecognized


class Matcher:
    """All anchors of a KB compiled once; `scanner()` gives per-source state."""

    def __init__(self, kb: KB, notice: Callable[[str], None] | None = None):
        self.anchors: list[tuple[Entry, Anchor]] = [(e, a) for e in kb for a in e.anchors]
        self.timeouts: dict[int, int] = {}  # anchor index -> lines it timed out on
        self.off: set[int] = set()  # anchors switched off after MAX_TIMEOUTS
        self.notice = notice or _to_stderr
        literals: dict[bytes, set[int]] = {}
        for i, (_, anchor) in enumerate(self.anchors):
            for lit in anchor.literals:
                literals.setdefault(lit.encode(), set()).add(i)
        for lit in GENERIC_LITERALS:
            literals.setdefault(lit.encode(), set()).add(_GENERIC)
        literals.setdefault(FRAME_LITERAL, set()).add(_FRAME)
        literals.setdefault(TRACEBACK_LITERAL, set()).add(_TRACEBACK)
        self.literals = list(literals)
        self.targets = [literals[lit] for lit in self.literals]
        self.prefilter = build(self.literals)

    def scanner(self, path: str) -> Scanner:
        return Scanner(self, path)

    def match_line(self, line: Line, candidates: set[int], frames: Iterable[tuple[int, str]] = ()) -> list[Event]:
        """Stage two: the full patterns of the anchors whose literals occur in this line, whatever
        its level; an anchor's guard (`unless`) and frame rule (`frame`, over `frames`: traceback
        frames as (line number, 'path:function  source'), those FRAME_WINDOW lines back) must agree too."""
        events: list[Event] = []
        seen: set[int] = set()
        known = line.quoted  # a guarded look-alike or a quoted source line is not an unknown failure
        for i in sorted(c for c in candidates if c >= 0):
            entry, anchor = self.anchors[i]
            if entry.errno in seen or i in self.off:
                continue
            try:
                m = anchor.compiled.search(line.text, timeout=REGEX_TIMEOUT)
                if m is not None and anchor.guard is not None and anchor.guard.search(line.text, timeout=REGEX_TIMEOUT):
                    known = True
                    continue
            except TimeoutError:
                self._timed_out(i, line)
                continue
            if m is not None and anchor.frames is not None and not any(
                n >= line.lineno - FRAME_WINDOW and anchor.frames.search(f) for n, f in frames
            ):
                continue
            if m is not None:
                seen.add(entry.errno)
                caps = {k: v for k, v in m.groupdict().items() if v is not None}
                events.append(Match(entry, anchor, line, caps))
        if not events and not known and _GENERIC in candidates and not line.quiet:
            try:
                g = GENERIC.match(line.text, timeout=REGEX_TIMEOUT)
                if g is None and " error: " in line.text:
                    g = GPU_ERROR.search(line.text, timeout=REGEX_TIMEOUT)
            except TimeoutError:
                g = None
            if g is not None:
                message = (g["message"] or "").strip()
                caught = CAUGHT.match(message)  # torch DataLoader: "KeyError: Caught KeyError in DataLoader worker process 0."
                events.append(Unrecognized(line, g["type"], message, g["inner"] or (caught and caught[1])))
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


def _to_stderr(message: str) -> None:
    sys.stderr.write(f"errmap: knowledge base: {message}\n")
    sys.stderr.flush()


@dataclass
class Scanner:
    """Feeds one source's bytes, chunk by chunk, and yields its events in line order."""

    matcher: Matcher
    path: str
    lineno: int = 1  # number of the line that the next byte belongs to
    lines_cut: int = 0
    _carry: bytes = b""
    _skipping: bool = field(default=False, repr=False)
    _frames: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=64), repr=False)
    _open: tuple[int, bytes] | None = field(default=None, repr=False)  # a traceback header no failure has followed yet

    def feed(self, chunk: bytes) -> list[Event]:
        events: list[Event] = []
        if self._skipping:
            ends = [i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0]
            if not ends:
                return events
            chunk = chunk[min(ends):]
            self._skipping = False
        buf = self._carry + chunk if self._carry else chunk
        end = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if end >= 0:
            events += self._scan(buf[: end + 1])
            buf = buf[end + 1:]
        if len(buf) > MAX_LINE:
            events += self._scan(buf[:MAX_LINE], cut=True)
            self.lines_cut += 1
            buf = b""
            self._skipping = True
        self._carry = buf
        return events

    def finish(self) -> list[Event]:
        """End of input: the last line may lack its newline; a traceback cut before its exception
        line is still a failure."""
        rest, self._carry = self._carry, b""
        events = self._scan(rest) if rest else []
        if self._open is not None:
            lineno, raw = self._open
            t = TRACEBACK.search(raw)
            kind = t["type"].decode() if t["type"] else "Traceback"
            line = peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""))
            events.append(Unrecognized(line, kind, "the log ends inside a traceback, before its exception line"))
            self._open = None
        return events

    def _scan(self, block: bytes, cut: bool = False) -> list[Event]:
        """Match a block of whole lines (or one cut line) and advance the line count."""
        m = self.matcher
        hits: dict[int, tuple[int, set[int]]] = {}  # line start -> (line end, anchor ids)
        for pat, stop in m.prefilter.hits(block):
            s = max(block.rfind(b"\n", 0, stop), block.rfind(b"\r", 0, stop)) + 1
            if s in hits:
                hits[s][1].update(m.targets[pat])
                continue
            ends = [i for i in (block.find(b"\n", stop), block.find(b"\r", stop)) if i >= 0]
            hits[s] = (min(ends) if ends else len(block), set(m.targets[pat]))
        events: list[Event] = []
        pos, lineno = 0, self.lineno
        for s in sorted(hits):
            e, ids = hits[s]
            lineno += block.count(b"\n", pos, s)
            pos = s
            raw = block[s:e]
            if ids == _GENERIC_ONLY and not _failure_shaped(raw):
                continue  # "Error" inside a word or a metric name: no exception line, skip the decoding
            if b"\x1b" in raw or b"\xc2" in raw:  # escapes (ESC or C1) are stripped per candidate line: cheap, and literals sit inside messages
                raw = ANSI.sub(b"", raw)
            if _FRAME in ids and (f := FRAME.search(raw)) is not None:
                # the quoted source line below a frame belongs to it: "path:function  source"
                nl = block.find(b"\n", e + 1)
                src = block[e + 1: nl if nl >= 0 else len(block)].strip()
                self._frames.append((lineno, (f[1] + b":" + f[2] + b"  " + src).decode("utf-8", "replace")))
            elif _TRACEBACK in ids and TRACEBACK.search(raw):
                self._open = (lineno, raw)
            if not any(i >= _GENERIC for i in ids):
                continue  # a frame or a traceback header only: recorded, nothing to match
            if self._open is not None and _failure_shaped(raw):
                self._open = None  # the traceback's exception line, known or not
            line = peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""), cut)
            found = m.match_line(line, ids, self._frames)
            if found:
                self._open = None
            events += found
        if not cut:
            self.lineno = lineno + block.count(b"\n", pos)
        return events


def scan_chunks(matcher: Matcher, path: str, chunks: Iterable[bytes]) -> Iterator[Event]:
    scanner = matcher.scanner(path)
    for chunk in chunks:
        yield from scanner.feed(chunk)
    yield from scanner.finish()
