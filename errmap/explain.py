"""`errmap explain`: a KB entry in the terminal, in the same sections as its docs page.

`HEADINGS` is the one list of sections: `print_entry` prints them here and `errmap.docs` renders
them as the page of the code, from the same helpers (`find_example`, `related`, `probe_lines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from rich.console import Console
from errmap.layout import block, row
from errmap.report import escape  # rich markup and terminal escapes of printed text

from errmap import gpus
from errmap.i18n import _, pad
from errmap.kb import KB, PLACEHOLDER, Entry
from errmap.lines import ANSI
from errmap.probes import PROBES
from errmap.report import aside, docs_url, lead, link_state

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
    captures: tuple[tuple[str, str], ...] = ()  # what the matched line gave the anchor's groups


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
    is this code before one where it is a consequence, one whose line says it alone before one that needs its
    traceback's frames, one whose message is whole on its line before one wrapped over several, and one whose
    matched line fits on a line.
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
    return Example(rel.as_posix(), tuple(window), n, str(side.get("origin", "")), str(side.get("how", "")),
                   str(side.get("machine", "")), tuple(sorted(hit.captures.items())))


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
    return f"{subject} {c.op} {target}".strip()


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


# ---------------------------------------------------------------- finding the entry


@dataclass(frozen=True)
class Found:
    """What `errmap explain QUERY` found: the entry, how, and the other close codes."""

    entry: Entry | None
    how: str  # "code" (an errno or slug), "message" (the matcher), "start" (a message cut short), "words", "" (none)
    others: tuple[Entry, ...] = ()


MIN_START = 20  # characters of a message's start that a pasted text must hold to name its entry


def start_of_message(query: str, kb: KB) -> Entry | None:
    """The entry a literal of which begins with the query from one of its words on: a message pasted cut
    short ("CUDA error: no kernel image is available"), which no anchor matches whole."""
    words = query.split()
    for k in range(len(words)):
        text = " ".join(words[k:])
        if len(text) < MIN_START:
            break
        for e in kb:
            if any(lit.startswith(text) for a in e.anchors for lit in a.literals):
                return e
    return None


WORDS_NEEDED = 0.6  # the share of a query's weight an entry's words must hold to be shown as its answer


def _words(value: str) -> list[str]:
    from errmap.docs import SEARCH_SEPARATOR, _EDGE

    out = (w.strip(_EDGE + "'") for w in SEARCH_SEPARATOR.split(value.lower()))
    return [w for w in out if len(w) >= 2 and not w.isdigit()]


def by_words(query: str, kb: KB) -> list[tuple[float, Entry]]:
    """Entries by the share of the query's words (each weighed by its rarity in the KB) that their
    title, slug and messages hold; a query word counts when it begins one of theirs, as in the site's search."""
    import math

    from errmap.docs import search_words

    vocab = {e.errno: set(search_words(e)) | set(_words(e.title)) | set(e.slug.split("-")) for e in kb}
    words = list(dict.fromkeys(_words(query)))
    has = {w: {n for n, v in vocab.items() if any(x.startswith(w) for x in v)} for w in words}
    weight = {w: math.log((len(vocab) + 1) / (len(has[w]) + 0.5)) for w in words}
    total = sum(weight.values()) or 1.0
    scored = [(sum(weight[w] for w in words if e.errno in has[w]) / total, e) for e in kb]
    return sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], x[1].errno))


def lookup(query: str, kb: KB, matcher) -> Found:
    """A code or slug; else the codes errmap's matcher gives the text read as a log, root cause
    first; else the entry whose words the query holds; else none, with the closest codes."""
    import difflib

    from errmap.matcher import scan_chunks
    from errmap.scan import feed
    from errmap.triage import Triage

    if (e := kb.get(query)) is not None:
        return Found(e, "code")
    triage = Triage()
    feed(triage, scan_chunks(matcher, "<query>", [query.encode("utf-8", "replace") + b"\n"]))
    ranked = triage.ranked()
    found = list({inc.entry.errno: inc.entry for inc in ranked}.values())
    if found:
        if ranked[0].words is not None:  # a likely match: the words of a family, unless the text starts a message
            return Found(start, "start") if (start := start_of_message(query, kb)) is not None else \
                Found(found[0], "words", tuple(found[1:]))
        # a message no anchor matches whole was read cut short
        whole = any(a.folded.search(line) for a in found[0].anchors for line in query.splitlines())
        return Found(found[0], "message" if whole else "start", tuple(found[1:]))
    if (e := start_of_message(query, kb)) is not None:
        return Found(e, "start")
    token = query.strip().lower()
    if token and " " not in token:
        near = difflib.get_close_matches(token, [e.slug for e in kb], n=3, cutoff=0.6)
        if near:
            return Found(None, "", tuple(kb.get(s) for s in near))
    scored = by_words(query, kb)
    if scored and scored[0][0] >= WORDS_NEEDED and (len(scored) == 1 or scored[0][0] > scored[1][0]):
        return Found(scored[0][1], "words", tuple(e for score, e in scored[1:3] if score >= WORDS_NEEDED))
    return Found(None, "", tuple(e for _, e in scored[:3]))


def print_entry(con: Console, e: Entry, kb: KB | None = None, matcher=None) -> None:
    example = find_example(e, matcher, fixtures_dir()) if matcher is not None else None
    probes, checks = probe_lines(e)
    rules = doctor_lines(e)

    def means() -> None:
        block(con, "  ", escape(e.summary))
        if e.applies_to:
            block(con, f"  [dim]{lead(_('Applies to:'))}[/]", escape(e.applies_to))

    def fix() -> None:
        groups = e.steps_by_stack()
        for stack, steps in groups:
            if len(groups) > 1:
                block(con, "  ", f"[bold]{escape(stack or _('Any run'))}[/]")
            digits = len(str(steps[-1][0]))
            for i, step in steps:
                what = [x for x in (gpus.label(step.gpu) if getattr(step, "gpu", ()) else "", getattr(step, "releases", "")) if x]
                when = f"[dim]{_('({what}) ').format(what=escape('; '.join(what)))}[/]" if what else ""
                block(con, f"  {i:>{digits}}. ", when + escape(e.fill(step.text)))

    def why() -> None:
        block(con, "  ", escape(e.fill(e.cause)))

    def links() -> None:
        if not e.links:
            con.print(f"  [dim]{_('None recorded.')}[/]")
        for link in e.links:
            block(con, f"  [dim]{pad(_(link.kind), 8)}[/] ", escape(link.url))
            block(con, " " * 11, escape(link.title + aside(state)) if (state := link_state(link)) else escape(link.title))

    def example_log() -> None:
        if example is None:
            con.print(f"  [dim]{_('No example log recorded yet.')}[/]")
            return
        width = len(str(example.lines[-1][0]))
        for n, text in example.lines:
            if n == example.marked:
                block(con, f"[bold red]▶[/] [bold]{n:>{width}}[/]  ", f"[bold]{escape(text)}[/]")
            else:
                # Context is cut at the terminal's edge; the matched line above wraps in full.
                row(con, f"  [dim]{n:>{width}}[/]  {escape(text)}")
        for label, value in ((_("how:"), example.how), (_("machine:"), example.machine)):
            if value:
                block(con, f"  [dim]{lead(label)}[/]", f"[dim]{escape(value)}[/]")

    def related() -> None:
        groups = related_groups(e, kb)
        if not groups:
            con.print(f"  [dim]{_('None.')}[/]")
        for label, items in groups:
            if len(items) > MANY:
                block(con, f"  [dim]{lead(_(label) + _(':'))}[/]", ", ".join(str(n) for n, _title in items))
                continue
            for n, title in items:
                block(con, f"  [dim]{lead(_(label) + _(':'))}[/]", f"{n} {escape(title or '')}")

    def confirms() -> None:
        if not probes:
            con.print(f"  [dim]{_('No probe: the message in the log decides alone.')}[/]")
        for name, what in probes:
            block(con, f"  [cyan]{name}[/]: ", escape(_(what)))
        for verdict, says in checks:
            block(con, f"  [dim]{lead(_('{verdict} when').format(verdict=_(verdict)))}[/]", escape(says))

    def doctor() -> None:
        if not rules:
            block(con, "  ", f"[dim]{_('errmap doctor has no check for this code.')}[/]")
        for test, sentences in rules:
            block(con, "  ", f"[cyan]{escape(test)}[/]")
            for says in sentences:
                block(con, f"    [dim]{lead(_('warns:'))}[/]", escape(PLACEHOLDER.sub(lambda m: f'<{m[1]}>', says)))

    def messages() -> None:
        for a in e.anchors:
            block(con, "  ", f"[cyan]{escape(' | '.join(a.literals))}[/]")
            block(con, "    ", f"[dim]{escape(a.source)}[/]")
            block(con, f"    [dim]{_('pattern')}[/] ", escape(a.regex))
            if a.frame:
                block(con, "    ", f"[dim]{_('only inside a traceback with a frame matching')}[/] {escape(a.frame)}")
            if a.unless:
                block(con, "    ", f"[dim]{_('not on a line matching')}[/] {escape(a.unless)}")

    body = {"means": means, "fix": fix, "why": why, "links": links, "example": example_log,
            "related": related, "confirms": confirms, "doctor": doctor, "messages": messages}
    extra = {
        "example": f"  [dim]({escape(example.path)}, {escape(example.origin or _('source not recorded'))})[/]" if example else "",
        "confirms": "  [dim](errmap scan --probe)[/]" if probes else "",
    }
    block(con, f"[bold red]{e.errno}[/] ", f"[bold]{escape(e.title)}[/]  [dim]{e.slug} · {escape(e.group)} · {_(e.role)}[/]")
    for key, heading in HEADINGS.items():
        con.print()
        block(con, "", f"[bold]{_(heading)}[/]{extra.get(key, '')}")
        body[key]()
    if url := docs_url(e.errno):
        con.print()
        block(con, f"[dim]{lead(_('docs') + _(':'))}[/]", escape(url))
