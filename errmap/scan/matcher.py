"""The compiled matcher: every anchor of a KB, its literals and supersets, and stage two on one line.

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
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path

import regex

from errmap.kb import gpus, versions
from errmap.kb import cache
from errmap.kb.model import KB, USER_RANGE, Anchor, Entry, message_regex
from errmap.kb.stacks import LITERALS as STACK_LITERALS
from errmap.scan import failures
from errmap.scan import superset as superset_module
from errmap.scan.events import Event, Match
from errmap.scan.failures import GENERIC, GENERIC_LITERALS, GPU_ERROR, LEVEL_LITERALS, UNGATED_LITERALS, unknown
from errmap.scan.lines import PREFIX, Line
from errmap.scan.prefilter import Hyperscan, HyperscanError, build, compiles, patterns_wanted
from errmap.scan.superset import DIGITS, Unsupported, digit_blind, superset
from errmap.report.i18n import _

MAX_LINE = 1 << 20  # longer lines are cut here; matching still runs on their start
REGEX_TIMEOUT = 0.25  # seconds; no line may hang the matcher
# Official anchors pass `errmap kb check`'s adversarial timing (a test keeps it so) and the built-in
# shapes below are linear, so they run without a timeout, which triples a regex call's cost; anchors
# from a user's KB (errno 9000-9999) keep REGEX_TIMEOUT.
MAX_TIMEOUTS = 3  # an anchor that times out on this many lines is switched off for the run
# A user's anchor that stays just under REGEX_TIMEOUT on every line would still take hours: over a scan it may spend
# BUDGET seconds, plus PER_LINE for each line it runs on (a linear pattern takes microseconds), then it is switched off.
BUDGET, PER_LINE = 2.0, 0.001
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

GENERIC_ID, FRAME_ID, TRACEBACK_ID, GPU_ID, UNGATED_ID, VERSION_ID = -1, -2, -3, -4, -5, -6
STACK_ID = -7  # STACK_ID - k: the k-th of stack.LITERALS
STACK_NAMES = list(STACK_LITERALS.values())
GENERIC_ONLY = {GENERIC_ID}


# Where a line's text is more than a part of its bytes' decoding: an SGR code that lost its ESC is removed (`\d`
# takes any digit) and a quoted `raise X("...")` rewritten (lines.peel). A line where the supersets' database
# finds this (as the id REWRITTEN_ID) keeps every anchor whose literal it holds; the escapes and NUL bytes that are
# removed are removed before the supersets run (`_narrow`).
REWRITTEN = rb"raise |\[[0-9;\x80-\xff]*m"
REWRITTEN_ID = STACK_ID - len(STACK_LITERALS)  # the next free id


def _search(pattern: regex.Pattern[str], text: str, risky: bool) -> regex.Match[str] | None:
    # even timeout=None costs as much as a timeout: leave the argument out where none is needed
    return pattern.search(text, timeout=REGEX_TIMEOUT) if risky else pattern.search(text)


class Matcher:
    """All anchors of a KB compiled once; a Scanner (scanner.py) holds one source's state."""

    def __init__(self, kb: KB, notice: Callable[[str], None] | None = None):
        self.anchors: list[tuple[Entry, Anchor]] = [(e, a) for e in kb for a in e.anchors]
        self.entries: dict[int, Entry] = {e.errno: e for e in kb}
        self.hinted = [e for e in kb if e.hints]
        self.timeouts: dict[int, int] = {}  # anchor index -> lines it timed out on
        self.spent: dict[int, tuple[float, int]] = {}  # a user's anchor index -> (seconds it took, lines it ran on)
        self.off: set[int] = set()  # anchors switched off after MAX_TIMEOUTS, or over their budget
        self.notice = notice or _to_stderr
        literals: dict[bytes, set[int]] = {}
        for i, (_, anchor) in enumerate(self.anchors):
            for lit in anchor.literals:
                literals.setdefault(lit.encode(), set()).add(i)
        for lit in GENERIC_LITERALS:
            literals.setdefault(lit.encode(), set()).add(GENERIC_ID)
        for lit in UNGATED_LITERALS + LEVEL_LITERALS:
            literals.setdefault(lit.encode(), set()).add(UNGATED_ID)
        literals.setdefault(FRAME_LITERAL, set()).add(FRAME_ID)
        literals.setdefault(TRACEBACK_LITERAL, set()).add(TRACEBACK_ID)
        for k, lit in enumerate(STACK_LITERALS):
            literals.setdefault(lit, set()).add(STACK_ID - k)
        for lit in gpus.LITERALS:
            literals.setdefault(lit, set()).add(GPU_ID)
        for lit in versions.LITERALS:
            literals.setdefault(lit, set()).add(VERSION_ID)
        self.literals = list(literals)
        self.targets = [literals[lit] for lit in self.literals]
        # ids whose lines are recorded (a frame, a traceback header, a stack's or a GPU's name) whatever anchors match:
        # every stage-one id but the anchors' and GENERIC's, so `ids <= recorded` says that no anchor is left
        self.recorded = {FRAME_ID, TRACEBACK_ID, GPU_ID, VERSION_ID, *(STACK_ID - k for k in range(len(STACK_LITERALS)))}
        # stage-one literals that only name a stack: the first in a block names it, those after have nothing to say
        self.names = {k: STACK_NAMES[STACK_ID - i] for k, (i, *more) in enumerate(self.targets) if not more and i <= STACK_ID}
        # stage-one literals that only name one package's release (a banner): those after the first have nothing to say
        self.releases = {k: versions.BANNERS[lit] for k, lit in enumerate(self.literals)
                         if lit in versions.BANNERS and self.targets[k] == {VERSION_ID}}
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
            cache.write("supersets", self._fingerprint, json.dumps(table).encode())
        self.superset_ids = [i for _, i in table]
        self.gate = set(self.superset_ids) - {REWRITTEN_ID}

    @cached_property
    def _fingerprint(self) -> str:
        """What is built from the anchors depends on: their patterns and guards, and this code."""
        h = hashlib.sha256(repr(([(a.regex, a.unless) for _, a in self.anchors], BEFORE_TEXT)).encode())
        for code in (__file__, superset_module.__file__, failures.__file__):  # BEFORE_TEXT: the prefixes lines.py peels
            h.update(Path(code).read_bytes())
        return h.hexdigest()[:24]

    def _cached(self, name: str, built: Callable[[], list]) -> list:
        """A list built from the anchors, read from the cache beside the KB's, or built and written there (a
        read-only home: built each time)."""
        try:
            return json.loads(cache.read(name, self._fingerprint) or b"")
        except ValueError:
            value = built()
            cache.write(name, self._fingerprint, json.dumps(value).encode())
            return value

    def _digit_bound(self) -> list[int]:
        """The anchors whose pattern or guard may tell one digit from another."""
        return [i for i, (_, a) in enumerate(self.anchors)
                if not digit_blind(message_regex(a.regex)) or a.unless is not None and not digit_blind(a.unless)]

    def _table(self, patterns: list[str], checked: bool) -> list[tuple[str, int]]:
        """(Hyperscan pattern, id) for every pattern with a superset; GENERIC's two patterns stand for one id."""
        ids = list(range(len(self.anchors))) + [GENERIC_ID, GENERIC_ID]
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
        return [(p, i) for i, sups in found.items() if sups for p in sups] + [(REWRITTEN.decode("latin-1"), REWRITTEN_ID)]

    def match_line(self, line: Line, candidates: set[int], frames: Iterable[tuple[int, str]] = (),
                   breaks: tuple[int, ...] = ()) -> list[Event]:
        """Stage two: the full patterns of the anchors whose literals occur in this line, whatever
        its level; an anchor's guard (`unless`) and frame rule (`frame`, over `frames`: traceback
        frames as (line number, 'path:function  source'), those FRAME_WINDOW lines back) must agree too.
        With `breaks` (where joined continuation lines begin), a match must start before the first or span one."""
        events: list[Event] = []
        seen: set[int] = set()
        known = line.quoted  # a guarded look-alike or a quoted source line is not an unknown failure
        generic = GENERIC_ID in candidates and not line.quiet  # whether an unknown failure may be reported here
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
            start = time.perf_counter() if risky else 0.0
            try:
                m = _search(anchor.compiled, line.text, risky)
                if m is not None and risky and anchor.guard is not None and _search(anchor.guard, line.text, risky):
                    known = True
                    continue
            except TimeoutError:
                self._timed_out(i, line)
                continue
            finally:
                if risky:
                    self._charge(i, time.perf_counter() - start, line)
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
        if not events and not known and (generic or UNGATED_ID in candidates):
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

    def _charge(self, i: int, seconds: float, line: Line) -> None:
        """Count a user's anchor's time; one over its budget is switched off, with a notice."""
        spent, lines = self.spent.get(i, (0.0, 0))
        self.spent[i] = spent, lines = spent + seconds, lines + 1
        if spent > BUDGET + PER_LINE * lines and i not in self.off:
            self.off.add(i)
            entry, anchor = self.anchors[i]
            self.notice(_("anchor {k} of {errno}-{slug} took {seconds} s on {n} lines (last {where}), over its time "
                          "budget; it is off for the rest of this scan. `errmap kb check` finds such patterns").format(
                k=entry.anchors.index(anchor) + 1, errno=entry.errno, slug=entry.slug, seconds=f"{spent:.1f}", n=lines,
                where=f"{line.path}:{line.lineno}"))


def _to_stderr(message: str) -> None:
    sys.stderr.write(f"errmap: knowledge base: {message}\n")
    sys.stderr.flush()


