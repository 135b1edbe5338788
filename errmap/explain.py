"""`errmap explain`: a KB entry in the terminal, in the same sections as its docs page.

`SECTIONS` is the one list of headings: `print_entry` prints them here and `errmap.docs` renders
them as the page of the code, from the same helpers (`find_example`, `related`, `probe_lines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from errmap.i18n import _
from errmap.kb import KB, Entry
from errmap.lines import ANSI
from errmap.probes import PROBES
from errmap.report import docs_url

SECTIONS = (
    "What it means",
    "Example log",
    "Messages it matches",
    "Why it happens",
    "How to fix",
    "Upstream patches and references",
    "How errmap confirms it",
    "Related codes",
)
BEFORE, AFTER = 8, 3  # lines of context shown around the matching line of an example log
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
    how: str  # how the log was made, from the sidecar
    machine: str = ""  # where it was made, from the sidecar


def fixtures_dir() -> Path | None:
    """fixtures/ of a checkout; an installed package has none."""
    folder = Path(__file__).resolve().parent.parent / "fixtures"
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


def find_example(e: Entry, matcher, fixtures: Path | None) -> Example | None:
    """A window of one fixture of the code around the first line errmap's own matcher gives it.

    Of the fixtures that match, a recorded one comes before a built one, one whose expected root
    is this code before one where it is a consequence, and one whose matched line fits on a line.
    """
    from errmap.matcher import Match, scan_chunks

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
                    if isinstance(ev, Match) and ev.entry.errno == e.errno), None)
        if hit is not None:
            side = _sidecar(log)
            expect = side.get("expect") or [e.errno]
            rank = (side.get("origin") != "recorded", expect[:1] != [e.errno], len(hit.line.raw.strip()) > SHOWN)
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
    return Example(rel.as_posix(), tuple(window), n, str(side.get("origin", "")), str(side.get("how", "")),
                   str(side.get("machine", "")))


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


def print_entry(con: Console, e: Entry, kb: KB | None = None, matcher=None) -> None:
    head = iter(SECTIONS)

    def section(extra: str = "") -> None:
        con.print(f"\n[bold]{_(next(head))}[/]{extra}")

    con.print(f"[bold red]{e.errno}[/] [bold]{escape(e.title)}[/]  [dim]{e.slug} · {escape(e.group)} · {_(e.role)}[/]")
    section()
    con.print(f"  {escape(e.summary)}")
    if e.applies_to:
        con.print(f"  [dim]{_('Applies to:')}[/] {escape(e.applies_to)}")

    example = find_example(e, matcher, fixtures_dir()) if matcher is not None else None
    section(f"  [dim]({escape(example.path)}, {escape(example.origin or 'source not recorded')})[/]" if example else "")
    if example is None:
        con.print(f"  [dim]{_('No example log recorded yet.')}[/]")
    else:
        width = len(str(example.lines[-1][0]))
        for n, text in example.lines:
            if n == example.marked:
                con.print(f"[bold red]▶[/] [bold]{n:>{width}}[/]  [bold]{escape(text)}[/]", soft_wrap=False, overflow="fold")
            else:
                # Context is cut at the terminal's edge; the matched line above folds in full.
                con.print(f"  [dim]{n:>{width}}[/]  {escape(text)}", soft_wrap=False, no_wrap=True, overflow="ellipsis")
        for label, value in (("how", example.how), ("machine", example.machine)):
            if value:
                con.print(f"  [dim]{label}: {escape(value)}[/]")

    section()
    for a in e.anchors:
        con.print(f"  [cyan]{escape(' | '.join(a.literals))}[/]  [dim]{escape(a.source)}[/]")
        con.print(f"    [dim]pattern[/] {escape(a.regex)}")
        if a.frame:
            con.print(f"    [dim]only inside a traceback with a frame matching[/] {escape(a.frame)}")
        if a.unless:
            con.print(f"    [dim]not on a line matching[/] {escape(a.unless)}")
    section()
    con.print(f"  {escape(e.fill(e.cause))}")
    section()
    for i, step in enumerate(e.fix, 1):
        con.print(f"  {i}. {escape(e.fill(step))}")
    section()
    for link in e.links:
        fixed = f" (fixed in {link.fixed_in})" if link.fixed_in else ""
        con.print(f"  [dim]{link.kind:<7}[/] {escape(link.url)}\n          {escape(link.title)}{escape(fixed)}")
    probes, checks = probe_lines(e)
    section("  [dim](errmap scan --probe)[/]" if probes else "")
    if not probes:
        con.print(f"  [dim]{_('No probe: the message in the log decides alone.')}[/]")
    for name, what in probes:
        con.print(f"  [cyan]{name}[/]: {escape(what)}")
    for verdict, says in checks:
        con.print(f"  [dim]{_('{verdict} when').format(verdict=_(verdict))}[/] {escape(says)}")
    section()
    groups = related_groups(e, kb)
    if not groups:
        con.print(f"  [dim]{_('None.')}[/]")
    for label, items in groups:
        if len(items) > MANY:
            con.print(f"  [dim]{_(label)}:[/] " + ", ".join(str(n) for n, _ in items))
            continue
        for n, title in items:
            con.print(f"  [dim]{_(label)}:[/] {n} {escape(title or '')}")
    if url := docs_url(e.errno):
        con.print(f"\n[dim]docs:[/] {escape(url)}")
