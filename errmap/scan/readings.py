"""Readings: the KB tried again on a failure line that no anchor matched as printed, read as people paste it.

The scanner (scanner.py) asks for these only on failure-shaped lines (failures.py) that gave nothing or only an
unrecognized failure, so they never run on the hot path. In order:
- cut: the line ends inside an anchor's message ("..., unable to" for "..., unable to compile"), as a paste or a
  terminal cuts its last words: the anchor matched up to the line's end (a partial match) over one of its literals,
  and the line ends inside a word or after a comma, not after a closing mark;
- folded: the message retyped wholly in lower or upper case ("valueerror: bfloat16 is only supported ..."): literals
  and patterns compared without case;
- hinted: the words of an entry's family (`hints:` in the KB) on a line of a failure's shape, a likely diagnosis:
  the entry whose most specific hint (most characters) matches, unless two entries tie; never an entry whose anchor
  read the line and refused it (a look-alike).
"""

from __future__ import annotations

from collections.abc import Iterable

import string

from errmap.kb.model import USER_RANGE, Anchor, Entry
from errmap.scan.lines import Line

# A line cut by a paste ends inside a word (any non-ASCII character counts) or after a comma or blank; one that ends
# with a closing mark is whole. The scanner asks the same of a line's bytes before it decodes one.
CUT_ENDS = frozenset(string.ascii_letters + string.digits + "_,;:- ")


def ends_cut(text: str) -> bool:
    """Whether a line's text ends as a paste that cut its last words leaves it."""
    return text[-1:] in CUT_ENDS or not text[-1:].isascii()


def _agrees(anchor: Anchor, line: Line, frames: list[tuple[int, str]], window: int) -> bool:
    """The anchor's guard does not find the line, and its frame rule (if any) finds a frame of the failure."""
    if anchor.guard is not None and anchor.guard.search(line.text):
        return False
    return anchor.frames is None or any(n >= line.lineno - window and anchor.frames.search(f) for n, f in frames)


def cut(anchors: Iterable[tuple[Entry, Anchor]], line: Line, frames: Iterable[tuple[int, str]] = (),
        window: int = 200) -> list[tuple[Entry, Anchor, dict[str, str]]]:
    """The anchors whose message the line holds up to its end, cut there."""
    text = line.text.rstrip()
    if not ends_cut(line.text):
        return []
    frames = list(frames)
    out, seen = [], set()
    for entry, anchor in anchors:
        if entry.errno in seen or entry.errno in USER_RANGE:
            continue
        m = anchor.compiled.search(text, partial=True)
        if m is None or not m.partial or not any(lit in m[0] for lit in anchor.literals):
            continue
        if _agrees(anchor, line, frames, window):
            seen.add(entry.errno)
            out.append((entry, anchor, {k: v for k, v in m.groupdict().items() if v}))
    return out


def folded(anchors: Iterable[tuple[Entry, Anchor]], line: Line, frames: Iterable[tuple[int, str]] = (),
           window: int = 200) -> list[tuple[Entry, Anchor, dict[str, str]]]:
    """The anchors that match the line with case ignored, where one of their literals occurs in it so."""
    lower = line.text.lower()
    if line.text not in (lower, line.text.upper()):
        return []  # a line in mixed case was not retyped: its case is the software's (`myTrainer` is no `Trainer`)
    frames = list(frames)
    out, seen = [], set()
    for entry, anchor in anchors:
        if entry.errno in seen or entry.errno in USER_RANGE or not any(lit.lower() in lower for lit in anchor.literals):
            continue
        m = anchor.folded.search(line.text)
        if m is not None and _agrees(anchor, line, frames, window):
            seen.add(entry.errno)
            out.append((entry, anchor, {k: v for k, v in m.groupdict().items() if v is not None}))
    return out


def hinted(entries: Iterable[Entry], text: str) -> tuple[Entry, tuple[str, ...]] | None:
    """The entry whose family's words a failure's text holds, with the words: the most specific hint (most characters)
    wins; a tie is no answer."""
    lower = text.lower()
    best: list[tuple[int, Entry, tuple[str, ...]]] = []
    for entry in entries:
        found = [h for h in entry.hints if all(w in lower for w in h)]
        if found:
            words = max(found, key=lambda h: sum(map(len, h)))
            best.append((sum(map(len, words)), entry, words))
    if not best:
        return None
    best.sort(key=lambda b: -b[0])
    if len(best) > 1 and best[1][0] == best[0][0]:
        return None
    return best[0][1], best[0][2]
