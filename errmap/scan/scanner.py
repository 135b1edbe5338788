"""The streaming scanner: one source's bytes, chunk by chunk, into events in line order.

Stage one (the prefilter's literals, then the supersets) picks the lines and the anchors left for them; the
scanner records what names the run (traceback frames, stacks, releases, a GPU), remembers the lines that gave
nothing by their shape, and hands the rest to the compiled Matcher (matcher.py) for stage two. Line numbers
come from counting newlines in the skipped bytes; `\r` ends a line segment (tqdm bars) but only `\n` advances
the line number, as in an editor.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from errmap.kb import gpus, versions
from errmap.kb.stacks import in_frame
from errmap.scan import readings
from errmap.scan.events import Event, GpuNamed, Match, Named, Release, Unrecognized
from errmap.scan.failures import GENERIC, GENERIC_LITERALS, LOUD_LEVELS, RAISED, glog_record
from errmap.scan.lines import ANSI, Line, peel
from errmap.scan.matcher import (CONTINUED, CONTINUED_MAX, FRAME, FRAME_ID, FRAME_LITERAL, FRAME_WINDOW, GENERIC_ID,
                                 GENERIC_ONLY, GPU_ID, MAX_LINE, PAD, PADDED, REWRITTEN_ID, STACK_ID, STACK_NAMES, TRACEBACK,
                                 TRACEBACK_ID, VERSION_ID, ZEROED, Matcher)


# A scanner remembers the lines that gave nothing, so that a line repeated (a warning every rank prints at every step,
# its digits read as 0) is matched once: lines of at most UNMATCHED_MAX bytes, at most UNMATCHED of them and
# UNMATCHED_BYTES in all (then it forgets them all at once).
UNMATCHED = 4096


UNMATCHED_MAX = 2048


UNMATCHED_BYTES = 1 << 20


# "Error"/"Exception" only with the punctuation of an exception line; every other literal is telling alone.
_SHAPES = (b"Error:", b"Exception:", b"Error(", b"Exception(",
           *(lit.encode() for lit in GENERIC_LITERALS if lit not in ("Error", "Exception")))


# Two searches: the type followed by its punctuation or alone before trailing blanks (those bytes.rstrip takes) at a
# line's end, then the other shapes; the standard library's engine skips to a pattern's first bytes, and one search
# over them all would stop at every "e" of a line for "error:".
_SHAPED = re.compile(rb"E(?:rror|xception)(?:[:(]|[ \t\x0b\x0c]*$)", re.MULTILINE)
_SHAPED_REST = re.compile(b"|".join(re.escape(s) for s in _SHAPES if not s.startswith((b"Error", b"Exception"))))
# The last byte of a line that a paste may have cut (readings.cut): a word's, a comma's or a blank's.
_CUT_LIKE = frozenset(map(ord, readings.CUT_ENDS)) | frozenset(range(0x80, 0x100))  # readings.ends_cut, of bytes


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


# A terminal's padding (PADDED) in a line's text: PAD blanks in its bytes less escapes, with the NUL bytes and lost SGR
# codes that peel removes between them. Read as one blank it may form a literal: such a line is remembered by its bytes.
_PADDED = re.compile(rb"(?: (?:\x00|\[[0-9;\x80-\xff]*m)*){%d}" % PAD)


def _raw(line: bytes | bytearray | memoryview) -> bytes:
    """A line's bytes less its escapes (ESC or C1): stripped per candidate line, as literals sit inside messages."""
    raw = bytes(line)
    return ANSI.sub(b"", raw) if b"\x1b" in raw or b"\xc2" in raw else raw


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
        """Match the whole lines (or one cut line) of block[:limit] and advance the line count: stage one's lines
        (`_hits`), less those remembered as giving nothing (`_left`), narrowed by the supersets (`_narrow`), then
        each line recorded and matched."""
        m = self.matcher
        hits = self._hits(block, limit)
        keys, again, starts = self._left(block, hits, cut)
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
            left = not tried <= m.recorded  # an anchor or GENERIC is left to try after the supersets
            # a failure-shaped line (each shape holds one of GENERIC's literals) that no anchor's superset nor GENERIC's
            # took: read again (cut, named inside a sentence)
            reread = not left and GENERIC_ID in ids and _rereadable(raws[s] if s in raws else _raw(block[s:e]), ids)
            if self._open is None and not left and not reread and ids.isdisjoint(m.recorded):
                self._remember(keys.get(s))
                continue  # nothing to record and no anchor left: not even its line number is needed
            lineno += block.count(b"\n", pos, s)
            pos = s
            raw = raws[s] if s in raws else _raw(block[s:e])
            events += self._record(block, limit, e, ids, lineno, raw)
            if ids <= m.recorded:
                continue  # a frame or a traceback header only: recorded, nothing to match
            events += self._stage_two(block, limit, e, ids, tried, left, lineno, raw, keys.get(s), cut, reread)
        if not cut:
            self.lineno = lineno + block.count(b"\n", pos, limit)
        return events

    def _record(self, block: bytes | bytearray, limit: int, e: int, ids: set[int], lineno: int, raw: bytes) -> list[Event]:
        """What a line names about the run, whatever anchors match it: a traceback's frame (and its stack and release),
        the start of a traceback, a stack, a package's release, the GPU."""
        events: list[Event] = []
        if FRAME_ID in ids and (f := FRAME.search(raw)) is not None:
            # the quoted source line below a frame belongs to it: "path:function  source"
            nl = block.find(b"\n", e + 1, limit)
            src = bytes(block[e + 1: nl if nl >= 0 else limit]).strip()
            self._frames.append((lineno, (f[1] + b":" + f[2] + b"  " + src).decode("utf-8", "replace")))
            path = f[1].decode("utf-8", "replace")
            events += self._named(in_frame(path), lineno, raw)
            if "-" in path and (found := versions.in_path(path)) is not None:
                events += self._release([found], lineno, raw)
        elif TRACEBACK_ID in ids and TRACEBACK.search(raw):
            self._open = (lineno, raw)
        for i in ids:
            if i <= STACK_ID:
                events += self._named(STACK_NAMES[STACK_ID - i], lineno, raw)
        if VERSION_ID in ids:
            events += self._release(versions.in_line(raw.decode("utf-8", "replace")), lineno, raw)
        if GPU_ID in ids and not self._gpu and (name := gpus.named_in(raw)) is not None:
            self._gpu = True
            events.append(GpuNamed(peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", "")), name))
        return events

    def _stage_two(self, block: bytes | bytearray, limit: int, e: int, ids: set[int], tried: set[int], left: bool,
                   lineno: int, raw: bytes, key: bytes | None, cut: bool, reread: bool) -> list[Event]:
        """A line's failures: the anchors left for it (`tried`) by the Matcher, then the readings of a failure line
        no anchor took (joined with its continuation lines, unpadded, read again); the open traceback is closed by its
        exception line. `key`: the line's bytes where it may be remembered as giving nothing."""
        m = self.matcher
        line, closes = None, False  # whether this is the open traceback's exception line, known or not
        if self._open is not None and _failure_shaped(raw):
            line = peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""), cut)
            closes = not line.quoted  # a frame's quoted `raise X(` source line is not
            if closes:
                self._open = None
        # a line whose result depends on the line alone, which may be remembered (the same bytes, or the same shape
        # where no digit can matter: the same result)
        key = None if closes or not ids.isdisjoint(m.recorded) or not tried.isdisjoint(m.contextual) else key
        if key is not None and self._recalled(key, ids) is not None:
            return []  # this line again: it gave nothing
        if not left and not closes and not reread:
            self._remember(key)
            return []  # no superset matched: no anchor can
        line = line or peel(self.path, lineno, raw.decode("utf-8", "replace").replace("\x00", ""), cut)
        # GENERIC's superset reads a line's start: an exception named inside a sentence is read by match_line too
        found = m.match_line(line, tried if GENERIC_ID in tried or GENERIC_ID not in ids else tried | GENERIC_ONLY,
                             self._frames)
        if len(found) == 1 and isinstance(found[0], Unrecognized) or not found and line.quiet and not line.quoted \
                and GENERIC_ID in tried and GENERIC.match(line.text):  # a failure line, wrapped, at a quiet level
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
        if not found and (reread or GENERIC_ID in ids and _rereadable(raw, ids)) \
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
        return found

    def _hits(self, block: bytes | bytearray, limit: int) -> dict[int, tuple[int, set[int]]]:
        """Stage one: the lines of block[:limit] holding a literal, by their start -> (their end, the ids found)."""
        m = self.matcher
        hits: dict[int, tuple[int, set[int]]] = {}
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
        return hits

    def _left(self, block: bytes | bytearray, hits: dict[int, tuple[int, set[int]]], cut: bool
              ) -> tuple[dict[int, bytes], set[int], list[int]]:
        """The lines of `hits` still to read: the bytes of those that may be remembered (`keys`), those that gave
        nothing before but may end a traceback (`again`), and the starts of all left, in order (`starts`); the
        remembered ones are dropped from `hits`."""
        # the lines that may be remembered (their bytes), and those that gave nothing before but may end a traceback
        keys = {} if cut else {s: bytes(block[s:e]) for s, (e, _) in hits.items() if e - s <= UNMATCHED_MAX}
        again: set[int] = set()
        unmatched = self._unmatched
        for s, key in keys.items() if unmatched else ():
            if (known := self._recalled(key, hits[s][1])) is None:
                continue
            if (shaped := known[0]) is None:  # read once, when the line comes again (as below)
                shaped = known[0] = _failure_shaped(_raw(key)) and (hits[s][1] != GENERIC_ONLY or _failure_shaped(key))
            if shaped:
                again.add(s)
            else:
                del hits[s]  # nothing to do
        starts = []
        for s in sorted(hits):
            e, ids = hits[s]
            if ids == GENERIC_ONLY and s not in again and not _failure_shaped(block[s:e]):
                self._remember(keys.get(s), False)  # "Error" inside a word or a metric name: no exception line
                continue
            starts.append(s)
        return keys, again, starts

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
                if (i := m.superset_ids[k]) == REWRITTEN_ID:
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
    scanner = Scanner(matcher, path)
    for chunk in chunks:
        yield from scanner.feed(chunk)
    yield from scanner.finish()
