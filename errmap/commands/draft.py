"""`errmap kb new`: draft an entry of your own KB from a failure line errmap did not know.

The line is read as scan reads it (lines.peel: the prefixes of launchers and loggers off). Its message becomes the
anchor: the fixed text escaped, the numbers, paths, addresses, hosts and ids in it generalised into named captures,
the longest fixed run the literal that stage one looks for. The draft is checked by scan itself: it must find the
line, and no line of the healthy logs in fixtures/clean/. The log around the line becomes the entry's fixture; the
cause and fix are left for the user to write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from errmap.kb import load as kbmod
from errmap.kb.model import USER_RANGE
from errmap.kb.stacks import NAMES, framework
from errmap.scan.events import Match, Named
from errmap.scan.lines import peel, printable
from errmap.scan.matcher import Matcher
from errmap.scan.scanner import scan_chunks

BEFORE, AFTER = 30, 10  # lines of the log kept as the fixture around the line
MIN_LITERAL = 4  # characters of fixed text the anchor's literal needs
# What varies between two incidents of one failure, each generalised into a capture of its name (first match wins).
VARYING = [
    ("url", r"https?://[^\s'\"<>]+", r"https?://[^\s'\"<>]+"),
    ("path", r"(?:[A-Za-z]:\\|~?\.{0,2}/)[^\s'\"`,:;()\[\]]+", r"\S+?"),
    ("host", r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b", r"[\d.:]+"),
    ("address", r"\b0x[0-9a-fA-F]+\b", r"0x[0-9a-fA-F]+"),
    ("id", r"\b(?=[0-9a-fA-F-]*\d)(?=[0-9a-fA-F-]*[a-fA-F])[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*\b", r"[0-9a-fA-F-]+"),
    ("number", r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]*[A-Za-z_])", r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"),
]
_VARYING = re.compile("|".join(f"(?P<{name}>{find})" for name, find, _ in VARYING))


class DraftError(Exception):
    """Why no entry could be drafted: said in one line."""


@dataclass
class Draft:
    errno: int
    slug: str
    message: str  # the line's message, as scan reads it
    regex: str
    literal: str
    captures: dict[str, str]
    framework: str | None
    fixture: str  # the log around the line
    origin: str  # file:line, or "a pasted line"


def anchor(message: str, keep: frozenset[str] = frozenset()) -> tuple[str, str, dict[str, str]]:
    """(regex, literal, captures) of a message: its fixed text escaped, what varies (VARYING, but the kinds in `keep`)
    named captures; the literal is its longest fixed run."""
    parts, fixed, captures = ["^"], [], {}
    pos = 0
    for m in _VARYING.finditer(message):
        kind = m.lastgroup
        if kind in keep:
            continue
        fixed.append(message[pos:m.start()])
        parts.append(_escape(message[pos:m.start()]))
        name = kind if kind not in captures else next(f"{kind}_{i}" for i in range(2, 100) if f"{kind}_{i}" not in captures)
        captures[name] = m.group()
        parts.append(f"(?P<{name}>{dict((k, p) for k, _, p in VARYING)[kind]})")
        pos = m.end()
    fixed.append(message[pos:])
    parts.append(_escape(message[pos:].rstrip()))
    literal = max((f.strip() for f in fixed), key=len, default="")
    if len(literal) < MIN_LITERAL:
        raise DraftError("the line has too little fixed text for an anchor (it is mostly numbers, paths or ids)")
    return "".join(parts), literal, captures


def _escape(text: str) -> str:
    return re.escape(text).replace("\\ ", " ")


def _slug(message: str) -> str:
    """The message's words in lower case, its exception's module path left out: json-decode-error-expecting-property."""
    message = re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*:)", "", message)
    words = re.findall(r"[a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1-\2", _VARYING.sub(" ", message)).lower())
    slug = "-".join(w for w in words if not w.isdigit())[:40].strip("-")
    return slug.rsplit("-", 1)[0] if len(slug) == 40 and "-" in slug else slug or "my-error"


def _title(message: str, width: int = 72) -> str:
    """The message's start, cut at a word to fit a title."""
    return message if len(message) <= width else message[:width].rsplit(" ", 1)[0] + " …"


def free_code(kb) -> int:
    """The code after the highest of the user range taken (the first of the range when none is)."""
    taken = [e.errno for e in kb if e.errno in USER_RANGE]
    if taken and max(taken) + 1 not in USER_RANGE:
        raise DraftError(f"no free code left in {USER_RANGE.start}-{USER_RANGE.stop - 1}")
    return max(taken) + 1 if taken else USER_RANGE.start


def read_source(where: str | None, pasted: str | None, stdin_text: str | None) -> tuple[list[str], int, str]:
    """(the log's lines, the failure line's number (1-based), where it came from) of FILE:LINE, --line or stdin."""
    if where:
        path, sep, number = where.rpartition(":")
        if not sep or not number.isdigit():
            raise DraftError(f"{where}: give FILE:LINE (the line number the scan report names)")
        try:
            lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise DraftError(f"{path}: {exc.strerror or exc}") from None
        n = int(number)
        if not 1 <= n <= len(lines):
            raise DraftError(f"{path} has {len(lines)} lines, no line {n}")
        return lines, n, where
    text = pasted if pasted is not None else stdin_text or ""
    lines = [x for x in text.splitlines() if x.strip()]
    if not lines:
        raise DraftError("give FILE:LINE, --line TEXT or the line on stdin")
    return lines[-1:], 1, "a pasted line"


def _scan(matcher: Matcher, name: str, lines: list[str]) -> list:
    return list(scan_chunks(matcher, name, ["".join(x + "\n" for x in lines).encode("utf-8", "replace")]))


def draft(lines: list[str], n: int, origin: str, kb_dirs: list[Path], out: Path, clean: Path | None) -> tuple[Draft, Path, Path]:
    """Write the draft entry and its fixture into `out`; return them. The anchor is checked by scan on the line and on
    every healthy log in `clean`."""
    message = peel("<line>", 1, printable(lines[n - 1])).text.strip()
    if not message:
        raise DraftError(f"line {n} is blank")
    kb = kbmod.load([*kb_dirs, out])
    errno = free_code(kb)
    first, last = max(0, n - 1 - BEFORE), min(len(lines), n + AFTER)
    fixture = lines[first:last]
    stacks = {e.stack for e in _scan(Matcher(kb), origin, lines) if isinstance(e, Named)}
    healthy = sorted(clean.glob("*.log")) if clean is not None and clean.is_dir() else []
    for keep in (frozenset(), frozenset({"number"})):  # numbers kept as printed where generalising them is too loose
        regex, literal, captures = anchor(message, keep)
        d = Draft(errno, _slug(message), message, regex, literal, captures, framework(stacks), "\n".join(fixture) + "\n", origin)
        entry, log = _write(d, out)
        trial = kbmod.load([*kb_dirs, out])
        if errno not in trial.entries:
            _remove(entry, log)
            raise DraftError("the draft is no valid entry: " + "; ".join(w for w in trial.warnings if str(entry) in w))
        matcher = Matcher(trial)
        found = [e for e in _scan(matcher, "fixture", fixture) if isinstance(e, Match) and e.entry.errno == errno]
        if not found:
            _remove(entry, log)
            raise DraftError("scan does not find the drafted anchor on its own line; write the entry by hand (kb/README.md)")
        loose = next(((p, e.line.lineno) for p in healthy for e in _scan(matcher, str(p), p.read_text(errors="replace").splitlines())
                      if isinstance(e, Match) and e.entry.errno == errno), None)
        if loose is None:
            return d, entry, log
        _remove(entry, log)
    raise DraftError(f"the drafted anchor also matches a healthy log ({loose[0]}:{loose[1]}); write the entry by hand")


def _remove(entry: Path, log: Path) -> None:
    """A rejected draft: its files, and the fixture folders it made when they are left empty."""
    entry.unlink()
    log.unlink()
    for folder in (log.parent, log.parent.parent):
        if not any(folder.iterdir()):
            folder.rmdir()


def _write(d: Draft, out: Path) -> tuple[Path, Path]:
    """The entry's YAML and its fixture under `out` (fixtures/<errno>/)."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "fixtures" / str(d.errno) / f"{d.slug}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(d.fixture, encoding="utf-8")

    def q(value: str) -> str:
        return yaml.safe_dump(value, default_style="'", width=10**6).strip().removesuffix("\n...")

    caps = "".join(f"\n    #   {k}: {v}" for k, v in d.captures.items())
    text = (
        f"# Drafted by `errmap kb new` from {d.origin}. Write the cause and the fix steps, then check it:\n"
        f"#   errmap kb check --kb {out}    and    errmap scan --kb {out} {log}\n"
        f"errno: {d.errno}\n"
        f"slug: {d.slug}\n"
        f"title: {q(_title(d.message))}\n"
        f"group: Your own entries\n"
        f"role: root\n"
        f"summary: {q('What this error means, in a sentence or two: ' + d.message[:200])}\n"
        f"anchors:\n"
        f"  - literal: {q(d.literal)}\n"
        f"    # the message with what varies generalised; what this line gave:{caps or ' nothing'}\n"
        f"    regex: {q(d.regex)}\n"
        f"    source: {q(f'{d.origin}: name the upstream file or issue that prints this message')}\n"
        + (f"applies_to: {q(NAMES[d.framework] + ' runs')}  # the stack the log names\n" if d.framework else "")
        + "cause: ''\n"
        "fix: []\n"
    )
    entry = out / f"{d.errno}-{d.slug}.yaml"
    entry.write_text(text, encoding="utf-8")
    return entry, log
