"""Matches: a two-stage matcher over raw bytes.

Stage one runs one multi-literal automaton (see prefilter.py) over whole chunks to find every anchor's required
literal; stage two decodes only the lines that hold a hit, peels their prefixes and runs the
anchors' full patterns there. Line numbers come from counting newlines in the skipped bytes.
`\r` ends a line segment (tqdm bars) but only `\n` advances the line number, as in an editor.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import regex

from errmap.kb import KB, Anchor, Entry
from errmap.lines import ANSI, Line, peel
from errmap.prefilter import build

MAX_LINE = 1 << 20  # longer lines are cut here; matching still runs on their start
REGEX_TIMEOUT = 0.25  # seconds; no line may hang the matcher

# Lines that look like a failure even when no anchor knows them: the last line of a Python
# traceback, a C++ terminate, a fatal interpreter error.
GENERIC_LITERALS = ["Error", "Exception", "terminate called after", "Fatal Python error"]
GENERIC = regex.compile(
    r"^(?:(?:[A-Za-z_]\w*\.)*(?P<type>[A-Z]\w*(?:Error|Exception))(?:\((?P<inner>[\w.]+)\))?(?::\s?(?P<message>.*))?"
    r"|(?P<type>terminate) called after throwing an instance of '(?P<message>[^']+)'.*"
    r"|(?P<type>Fatal Python error): (?P<message>.*))$"
)

CAUGHT = regex.compile(r"Caught (\w+) in ")
_GENERIC_ONLY = {-1}
_SHAPES = (b"Error:", b"Exception:", b"Error(", b"Exception(", b"terminate called after", b"Fatal Python error")


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

    def __init__(self, kb: KB):
        self.anchors: list[tuple[Entry, Anchor]] = [(e, a) for e in kb for a in e.anchors]
        literals: dict[bytes, set[int]] = {}
        for i, (_, anchor) in enumerate(self.anchors):
            for lit in anchor.literals:
                literals.setdefault(lit.encode(), set()).add(i)
        for lit in GENERIC_LITERALS:
            literals.setdefault(lit.encode(), set()).add(-1)
        self.literals = list(literals)
        self.targets = [literals[lit] for lit in self.literals]
        self.prefilter = build(self.literals)

    def scanner(self, path: str) -> Scanner:
        return Scanner(self, path)

    def match_line(self, line: Line, candidates: set[int]) -> list[Event]:
        """Stage two: the full patterns of the anchors whose literals occur in this line."""
        events: list[Event] = []
        seen: set[int] = set()
        for i in sorted(candidates - {-1}):
            entry, anchor = self.anchors[i]
            if entry.errno in seen or (line.quiet and not anchor.any_level):
                continue
            try:
                m = anchor.compiled.search(line.text, timeout=REGEX_TIMEOUT)
            except TimeoutError:
                continue
            if m is not None:
                seen.add(entry.errno)
                caps = {k: v for k, v in m.groupdict().items() if v is not None}
                events.append(Match(entry, anchor, line, caps))
        if not events and -1 in candidates and not line.quiet:
            try:
                g = GENERIC.match(line.text, timeout=REGEX_TIMEOUT)
            except TimeoutError:
                g = None
            if g is not None:
                message = (g["message"] or "").strip()
                caught = CAUGHT.match(message)  # torch DataLoader: "KeyError: Caught KeyError in DataLoader worker process 0."
                events.append(Unrecognized(line, g["type"], message, g["inner"] or (caught and caught[1])))
        return events


@dataclass
class Scanner:
    """Feeds one source's bytes, chunk by chunk, and yields its events in line order."""

    matcher: Matcher
    path: str
    lineno: int = 1  # number of the line that the next byte belongs to
    lines_cut: int = 0
    _carry: bytes = b""
    _skipping: bool = field(default=False, repr=False)

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
        """End of input: the last line may lack its newline."""
        rest, self._carry = self._carry, b""
        return self._scan(rest) if rest else []

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
            if b"\x1b" in raw:  # colours are stripped per candidate line: cheap, and literals sit inside messages
                raw = ANSI.sub(b"", raw)
            raw = raw.decode("utf-8", "replace").replace("\x00", "")
            events += m.match_line(peel(self.path, lineno, raw, cut), ids)
        if not cut:
            self.lineno = lineno + block.count(b"\n", pos)
        return events


def scan_chunks(matcher: Matcher, path: str, chunks: Iterable[bytes]) -> Iterator[Event]:
    scanner = matcher.scanner(path)
    for chunk in chunks:
        yield from scanner.feed(chunk)
    yield from scanner.finish()
