"""Text that nothing reading errmap's output acts on: a CI runner's workflow commands and a terminal's hidden characters.

The GitHub Actions runner reads every line a step prints, stdout and stderr alike: a line that starts with `::`
after blanks is a command (`::add-mask::`, `::set-output name=…::`, `::error …::`), and so is a registered name
after `##[` anywhere in a line (the runner's older form). A log, a file name or a KB file must never issue one
through errmap: `install` puts `Inert` around stdout and stderr, which breaks both with a zero-width space
(U+200B) in whatever errmap prints, so the text reads as it was; errmap's own annotations (`--format github`)
alone are written past it (`unguarded`). JSON escapes `##[` itself (report/dumps.py), so its strings stay exact.
`literal` writes a name or a one-line message with every character that would hide, reorder or break it as a
Python escape (`\\n`, `\\x1b`, `\\u202e`, and `\\xff` for a byte of a file name that is not UTF-8); `visible`
does so for the characters of a text that are no controls yet reorder or hide what a terminal shows.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import regex

BREAK = "\u200b"  # zero width: the text reads the same on a screen, a runner parses no command from it
# A workflow command: `::` first on a line (the runner ends one at \n, \r or both) after blanks (it trims them),
# or the older `##[` anywhere in one.
_BLANKS = r"(?:[^\S\r\n]|\ufeff)*"
_COMMAND = regex.compile(rf"(?:^|(?<=\r))({_BLANKS}):(?=:)|#(?=#\[)", regex.MULTILINE)
_OPEN_LINE = regex.compile(_BLANKS + ":?")  # a line so far that the next write may still turn into a command
# Bidirectional embeddings, overrides and isolates: they reorder what a terminal shows (CVE-2021-42574).
BIDI = "\u202a-\u202e\u2066-\u2069"
# Controls (C0 but none kept, DEL, C1), bidi controls, line and paragraph separators, and lone surrogates
# (Python's stand-ins for the bytes of a file name that are not UTF-8).
_HIDDEN = regex.compile(f"[\x00-\x1f\x7f-\x9f{BIDI}\u2028\u2029\ud800-\udfff]")
_VISIBLE = regex.compile(f"[{BIDI}\u2028\u2029\ud800-\udfff]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def inert(text: str) -> str:
    """`text` with no line a CI runner reads as a workflow command."""
    return _COMMAND.sub(lambda m: f"{m[1]}:{BREAK}" if m[0] != "#" else f"#{BREAK}", text)


class Inert:
    """A text stream that writes through `inert`, keeping what the line so far says across writes."""

    def __init__(self, stream: TextIO):
        self.unguarded = stream
        self._line = ""  # the line written so far while a command may still start it, else "x" and its last character

    def write(self, text: str) -> int:
        before = self._line
        whole = before + text
        self.unguarded.write(inert(whole)[len(before):])
        line = whole[max(whole.rfind("\n"), whole.rfind("\r")) + 1:]
        self._line = line if _OPEN_LINE.fullmatch(line) else "x" + line[-1]
        return len(text)

    def flush(self) -> None:
        self.unguarded.flush()

    def isatty(self) -> bool:
        return self.unguarded.isatty()

    def fileno(self) -> int:
        return self.unguarded.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer: the stream's own
        return getattr(self.unguarded, name)


def install() -> None:
    """Everything errmap prints for people, on stdout and stderr, through `Inert`."""
    if not isinstance(sys.stdout, Inert):
        sys.stdout = Inert(sys.stdout)
    if not isinstance(sys.stderr, Inert):
        sys.stderr = Inert(sys.stderr)


def unguarded(stream: TextIO) -> TextIO:
    """Where errmap's own workflow commands go: the stream under `Inert`."""
    return stream.unguarded if isinstance(stream, Inert) else stream


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _SHORT:
        return _SHORT[ch]
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte of a name that is not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with each bidi control, line or paragraph separator and lone surrogate written as an escape."""
    return _VISIBLE.sub(lambda m: _escape(m[0]), text)


def literal(text: str) -> str:
    """A file name or one line of message as visible text: a character a terminal acts on, hides or reorders,
    a line break, and a byte that is not UTF-8 written as a Python escape (as `ls -b` shows names)."""
    return _HIDDEN.sub(lambda m: _escape(m[0]), text)
