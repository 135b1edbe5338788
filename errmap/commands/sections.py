"""The sections of a KB entry, shared by `errmap explain` (the terminal) and the docs site (its page):
`HEADINGS` is the one list of them, and the helpers here fill them (an example from the fixtures, related
codes, probes, what doctor checks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from errmap.kb.model import KB, Entry
from errmap.probes import PROBES
from errmap.report.i18n import _, language
from errmap.scan.lines import ANSI

BEFORE, AFTER = 8, 3  # lines of context shown around the matching line of an example log


# The sections of an entry by key, in the order a reader needs them: what it is and what to do
# first, then why and the evidence, the rules errmap matches last. The keys name them in code.
HEADINGS = {
    "means": "What it means",
    "fix": "How to fix",
    "why": "Why it happens",
    "links": "Upstream patches and references",
    "example": "Example log",
    "related": "Related codes",
    "confirms": "How errmap confirms it",
    "doctor": "Checked before a run (errmap doctor)",
    "messages": "Messages it matches",
}


SECTIONS = tuple(HEADINGS.values())


SHOWN = 240  # characters of one example line


SHOWN_HIT = 1000  # characters of the matched line


MAX_FIXTURE = 8 << 20  # bytes of a fixture read to find an example


@dataclass(frozen=True)
class Example:
    """A window of a fixture log around the first line that the matcher gives to this code."""

    path: str  # relative to the checkout, e.g. fixtures/1012/p40.log
    lines: tuple[tuple[int, str], ...]  # (line number, text), ANSI stripped, cut to SHOWN characters
    marked: int  # the number of the matching line
    origin: str  # recorded or built, from the sidecar
    how: str  # how the log was made, from the sidecar (its `zh:` text in Chinese)
    machine: str = ""  # where it was made, from the sidecar (its `zh:` text in Chinese)
    captures: tuple[tuple[str, str], ...] = ()  # what the matched line gave the anchor's groups


def fixtures_dir() -> Path | None:
    """fixtures/ of a checkout; an installed package has none."""
    folder = Path(__file__).resolve().parents[2] / "fixtures"
    return folder if folder.is_dir() else None


def _cut(text: str, limit: int = SHOWN) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else text[:limit] + " …"


def _sidecar(log: Path) -> dict:
    side = log.with_name(log.name.removesuffix(".log") + ".source.yaml")
    try:
        data = yaml.safe_load(side.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _said(side: dict, key: str) -> str:
    """A sidecar's `key` as people read it: in Chinese, the text under its `zh:` mapping."""
    local = side.get(language()) if language() != "en" else None
    return str((local.get(key) if isinstance(local, dict) else None) or side.get(key, ""))


def find_example(e: Entry, matcher, fixtures: Path | None) -> Example | None:
    """A window of one fixture of the code around the first line errmap's own matcher gives it.

    Of the fixtures that match, a recorded one comes before a built one, one whose expected root
    is this code before one where it is a consequence, one whose line says it alone before one that needs its
    traceback's frames, one whose message is whole on its line before one wrapped over several, and one whose
    matched line fits on a line.
    """
    from errmap.scan.events import Match
    from errmap.scan.scanner import scan_chunks

    folder = fixtures / str(e.errno) if fixtures else None
    if folder is None or not folder.is_dir():
        return None
    found = []
    for log in sorted(folder.glob("*.log")):
        try:
            with log.open("rb") as fh:
                data = fh.read(MAX_FIXTURE)
        except OSError:
            continue
        hit = next((ev for ev in scan_chunks(matcher, str(log), [data])
                    if isinstance(ev, Match) and ev.entry.errno == e.errno and ev.anchor is not None), None)
        if hit is not None:
            side = _sidecar(log)
            expect = side.get("expect") or [e.errno]
            joined = hit.line.text.strip() not in hit.line.raw  # read with the lines that continue it
            alone = hit.anchor.frames is None  # the line says it by itself, without the frames of its traceback
            rank = (side.get("origin") != "recorded", expect[:1] != [e.errno], not alone, joined, len(hit.line.raw.strip()) > SHOWN)
            found.append((rank, log.name, log, data, hit, side))
    if not found:
        return None
    _, _, log, data, hit, side = min(found, key=lambda f: f[:2])
    rows = ANSI.sub(b"", data).decode("utf-8", "replace").split("\n")
    n = hit.line.lineno
    window = []
    for i in range(max(1, n - BEFORE), min(len(rows), n + AFTER) + 1):
        if i == n:  # the matched line in full, up to the bound of a diagnosis
            window.append((i, _cut(hit.line.raw, SHOWN_HIT).replace("\x00", "")))
            continue
        # A line of \r segments (a progress bar) shows as a terminal leaves it: its last segment.
        segments = [s for s in rows[i - 1].split("\r") if s.strip()]
        window.append((i, _cut(segments[-1] if segments else "").replace("\x00", "")))
    while window and window[-1][0] > n and not window[-1][1].strip():
        window.pop()
    rel = log.relative_to(fixtures.parent) if fixtures else log
    return Example(rel.as_posix(), tuple(window), n, str(side.get("origin", "")), _said(side, "how"),
                   _said(side, "machine"), tuple(sorted(hit.captures.items())))


def related(e: Entry, kb: KB | None) -> list[tuple[str, int, str | None]]:
    """(label, errno, title) for the codes that cause this one and for related codes."""
    title = (lambda n: kb.entries[n].title if kb and n in kb.entries else None)
    return [("Usually caused by", n, title(n)) for n in e.caused_by] + [
        ("Related", n, title(n)) for n in e.related if n not in e.caused_by]


MANY = 6  # longer lists of related codes show as numbers on one line


def related_groups(e: Entry, kb: KB | None) -> list[tuple[str, list[tuple[int, str | None]]]]:
    """`related` as (label, [(errno, title)]) groups, in order."""
    groups: dict[str, list[tuple[int, str | None]]] = {}
    for label, n, title in related(e, kb):
        groups.setdefault(label, []).append((n, title))
    return list(groups.items())


def probe_lines(e: Entry) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The probes with what each reads, and the checks as (verdict, sentence)."""
    return [(p, PROBES.get(p, "")) for p in e.probes], [(c.verdict, c.says) for c in e.checks]


def _shown(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)


def condition_text(c) -> str:
    """A prediction's condition as one line: `gpu.capability < 8.0`, `setting data.max_prompt_length`."""
    subject = (c.fact + (f"({', '.join(f'{k}={v}' for k, v in c.captures.items())})" if c.captures else "")
               + (f".{c.field}" if c.field else "")) if c.fact else c.setting
    if c.part:
        subject = f"{c.part}({subject})"
    if c.against:
        target = c.against + (f".{c.against_field}" if c.against_field else "")
    elif isinstance(c.against_setting, list) and c.op not in ("missing", "present"):
        target = " + ".join(c.against_setting)
    elif c.against_setting is not None:
        settings = [c.against_setting] if isinstance(c.against_setting, str) else c.against_setting
        values = c.value if isinstance(c.value, list) else [] if c.value is None else [c.value]
        target = _shown([*settings, *values]) if isinstance(c.against_setting, list) or values else settings[0]
    else:
        target = "" if c.value is None else _shown(c.value)
    op = _(c.op) if c.op in ("present", "missing") else c.op  # the words among the operators
    return f"{subject} {op} {target}".strip()


def doctor_lines(e: Entry) -> list[tuple[str, list[str]]]:
    """What `errmap doctor` checks for this code before a run: (the test, the sentences it may say,
    with their {placeholders}) for each prediction: its conditions, or its mechanism with the parameters."""

    out = []
    for p in e.predicts:
        tested: list[tuple] = []
        shown = []
        for c in p.when:  # a condition that only names a field of a fact tested before it is no test
            if not (c.op == "present" and c.fact and c.value is None and c.name and (c.fact, c.captures) in tested):
                shown.append(condition_text(c))
            tested.append((c.fact, c.captures))
        if p.mechanism:
            test = f"{p.mechanism}({', '.join(f'{k}={_shown(v)}' for k, v in p.params.items())})"
        else:
            test = ", ".join(shown)
        out.append((test, p.sentences))
    return out
