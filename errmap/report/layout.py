"""Text laid out for a terminal: wrapped at its width with hanging indents, never inside a token.

The width is COLUMNS when it is set, else the terminal's when the output goes to one, else WIDTH:
piped or redirected output is laid out at 80 columns wherever it runs, so that it reads the same in
a file, a pager or a test; a terminal's height (`height`) is the room of a report (report/text.py).
Lines break only at white space and at the edge of a wide (CJK) character; a `code span` (a command,
a config key, a URL: spaces and all), a path or a URL is never split. A token that does not fit what
is left of a line starts the next one whole. One wider than the room after the hanging indent gets a
line of its own, at the block's margin (the column its label starts at) when it fits there, else at
column 0; one wider than the whole width runs past the edge there, for the terminal to fold: what is
copied from the screen is then still the whole token.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

import regex
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

WIDTH = 80  # columns of output that is not a terminal, when COLUMNS is not set
MIN_ROOM = 16  # cells a wrapped line keeps after its indent, however narrow the terminal
ELLIPSIS = "…"

# a code span, a size with its unit ("139.80 GiB"), a run of white space, a run of ASCII that starts
# neither (no digit, no backtick: one unit, as its characters would be), one character
_UNIT = regex.compile(r"`[^`\n]+`|\d+(?:\.\d+)? (?:[KMGTP]i?B|bytes)\b|\s+|[!-/:-_a-~]+|\X")
_NO_START = set(",.;:!?)]}%'\"、，。；：！？）》」』】…’”")  # never the first character of a line
_NO_END = set("([{（《「『【‘“")  # never the last
_SENTENCE_END = (".", ";", "。", "；", "！", "？", "!", "?")


def width(stream: TextIO) -> int:
    """The columns to lay out for: COLUMNS, else the terminal `stream` writes to, else WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or WIDTH
    except (AttributeError, OSError, ValueError):
        pass
    return WIDTH


def height(stream: TextIO) -> int | None:
    """The rows of the terminal `stream` writes to (LINES when it is set); None for a pipe or a file, which
    have no screen to fit."""
    try:
        if not stream.isatty():
            return None
        lines = os.environ.get("LINES", "").strip()
        return int(lines) if lines.isdigit() and int(lines) > 0 else os.get_terminal_size(stream.fileno()).lines or None
    except (AttributeError, OSError, ValueError):
        return None


def console(stderr: bool = False) -> Console:
    """A console for stdout (or stderr) at `width`; it never wraps on its own: `block` does."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width(sys.stderr if stderr else sys.stdout))


def _text(markup: str) -> Text:
    """Markup as rich Text on one line: a tab or a newline of a log or a KB text reads as a space."""
    return Text.from_markup(markup.replace("\t", " ").replace("\n", " "))


def _wide(unit: str) -> bool:
    return len(unit) == 1 and cell_len(unit) == 2


def _atoms(text: str) -> list[tuple[int, int]]:
    """(start, end) of the pieces a line may break between: white space separates them, and so does the
    edge of a wide character (not before closing punctuation); a code span is one piece, however wide."""
    atoms: list[list[int]] = []
    prev = None  # the unit before, None after white space
    for m in _UNIT.finditer(text):
        u = m.group()
        if u.isspace():
            prev = None
            continue
        if prev is not None and not ((_wide(prev) or _wide(u)) and u[0] not in _NO_START and prev[-1] not in _NO_END):
            atoms[-1][1] = m.end()
        else:
            atoms.append([m.start(), m.end()])
        prev = u
    glued: list[list[int]] = []
    for a, b in atoms:  # a lone "·" holds the words beside it: "module-not-found · once" breaks nowhere
        if glued and (text[a:b] == "·" or text[glued[-1][1] - 1] == "·"):
            glued[-1][1] = b
        else:
            glued.append([a, b])
    return [(a, b) for a, b in glued]


def _breaks(text: str, first: int, room: int, label: bool) -> list[int]:
    """Offsets in `text` where its lines after the first start: `first` cells on the first line (after
    its lead), `room` on the rest. A piece that does not fit what is left starts a line, also the
    body's first piece where a `label` is left alone on the first line; a line holding a piece wider
    than `room` holds nothing else."""
    starts: list[int] = []
    used, avail, end = 0, first, 0
    for a, b in _atoms(text):
        size = cell_len(text[a:b])
        gap = cell_len(text[end:a]) if used else 0
        if used + gap + size > avail and (used or label):
            starts.append(a)
            used, avail = size, room
        else:
            used += gap + size
        end = b
    return starts


def _cut(text: str, first: int, room: int, label: bool, lines: int) -> int | None:
    """Where to end `text` so that it and an ellipsis fill at most `lines` lines: after a sentence when
    one ends in the last quarter, else after a word; None when it fits whole."""
    starts = _breaks(text, first, room, label)
    if len(starts) < lines:
        return None
    ends = [b for _, b in reversed(_atoms(text[: starts[lines - 1]]))]
    word = next((b for b in ends if len(_breaks(text[:b] + " " + ELLIPSIS, first, room, label)) < lines), 0)
    sentence = next((b for b in ends if b <= word and text[b - 1] in _SENTENCE_END), 0)
    return sentence if sentence >= 3 * word // 4 else word


def block(con: Console, lead: str, body: str = "", lines: int | None = None, margin: int | None = None) -> None:
    """Print markup `lead` then markup `body`, wrapped at the console's width, every line after the
    first indented to where the body starts (a line too wide for that at `margin`, by default where
    the lead's text starts, or at column 0; the first line too where the lead is only spaces); with
    `lines`, cut to that many lines with an ellipsis (or to nothing when not a word of it fits)."""
    head, text = _text(lead), _text(body)
    indent = cell_len(head.plain)
    label = bool(head.plain.strip())
    if margin is None:
        margin = indent - cell_len(head.plain.lstrip(" "))
    room = max(con.width - indent, MIN_ROOM)
    first = max(con.width - indent, 0)
    if lines is not None and (cut := _cut(text.plain, first, room, label, lines)) is not None:
        text = text[:cut]  # nothing when not a word fits
        if cut:
            text.rstrip()
            text.append(ELLIPSIS if _wide(text.plain[-1]) else " " + ELLIPSIS)
    offsets = [len(head.plain) + b for b in _breaks(text.plain, first, room, label)]
    out = Text()
    for i, line in enumerate((head + text).divide(offsets)):
        if i == 0 and not label:  # only an indent: laid out as the lines after it
            line = line[len(head.plain):]
        line.rstrip()
        size = cell_len(line.plain)
        shift = next((at for at in (indent, margin) if at + size <= con.width), 0) if (i or not label) and size else 0
        out.append_text(Text(("\n" if i else "") + " " * shift) + line)
    con.print(out)


def row(con: Console, markup: str) -> None:
    """Print markup as one row, cut with an ellipsis at the console's width."""
    text = _text(markup)
    text.truncate(con.width, overflow="ellipsis")
    con.print(text)
