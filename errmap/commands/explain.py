"""`errmap explain`: a KB entry in the terminal, in the same sections as its docs page.

The sections and the helpers that fill them are errmap/commands/sections.py's, shared with the docs
site (errmap/commands/docs.py); a query's words are split as the site's search does (search.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

from errmap.commands.search import EDGE, SEARCH_SEPARATOR, search_words
from errmap.commands.sections import (HEADINGS, MANY, doctor_lines, find_example, fixtures_dir, probe_lines, related_groups)
from errmap.kb import gpus
from errmap.kb.model import KB, PLACEHOLDER, Entry
from errmap.report.contract import docs_url, link_state
from errmap.report.text import aside, escape, lead  # escape: rich markup and terminal escapes
from errmap.report.i18n import _, language, pad
from errmap.report.layout import block, row
from errmap.scan.lines import peel, printable


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
SUGGESTED = 3  # codes a query that names none is shown, unless more are named by all its words (up to NAMED)
NAMED = 5


def _words(value: str) -> list[str]:
    out = (w.strip(EDGE + "'") for w in SEARCH_SEPARATOR.split(value.lower()))
    return [w for w in out if len(w) >= 2 and not w.isdigit()]


def _name(e: Entry) -> set[str]:
    return set(_words(e.title)) | set(e.slug.split("-"))


def _anchor_words(e: Entry) -> list[set[str]]:
    """Each message's words, with the projects whose source prints it (`vllm` of vllm-project/vllm)."""
    return [set(search_words(e, anchors=[a])) | {w for repo, _path, _v in a.sites for w in _words(repo.split("/")[-1])} for a in e.anchors]


def _named(e: Entry, kb: KB) -> set[str]:
    """What names an entry: its title and slug, and its Chinese title and the words Chinese users write for it."""
    zh = kb.zh.get(e.errno)
    return _name(e) | ({w for t in (zh.title, *zh.search) for w in _words(t)} if zh else set())


def by_words(query: str, kb: KB) -> list[tuple[float, Entry]]:
    """Entries by the share of the query's words (each weighed by its rarity in the KB) that their
    title, slug, Chinese title and search words, messages and the projects printing them hold; a query word counts
    when it begins one of theirs, as in the site's search. Among equal shares, the entry most about those words comes
    first: named by them, said in its summary, and held by more of its messages."""
    import math

    def holds(words: set[str], w: str) -> bool:
        return any(x.startswith(w) for x in words)

    anchors = {e.errno: _anchor_words(e) for e in kb}
    names = {e.errno: _named(e, kb) for e in kb}
    vocab = {e.errno: names[e.errno] | set().union(*anchors[e.errno]) for e in kb}
    words = list(dict.fromkeys(_words(query)))
    has = {w: {n for n, v in vocab.items() if holds(v, w)} for w in words}
    weight = {w: math.log((len(vocab) + 1) / (len(has[w]) + 0.5)) for w in words}
    total = sum(weight.values()) or 1.0

    def about(e: Entry) -> float:
        msgs = anchors[e.errno]
        return sum(2 * holds(names[e.errno], w) + holds(set(_words(e.summary)), w)
                   + (sum(holds(m, w) for m in msgs) / len(msgs) if msgs else 0) for w in words)

    scored = [(sum(weight[w] for w in words if e.errno in has[w]) / total, about(e), e) for e in kb]
    return [(share, e) for share, _about, e in sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], -x[1], x[2].errno))]


def read_as_scan(query: str) -> str:
    """A pasted text's lines as scan reads them: terminal escapes and the prefixes of launchers and loggers (Ray's
    `(Actor pid=…, ip=…)`, torchrun's `[rank0]:`, a timestamp and level) taken off, by scan's own `peel`."""
    return "\n".join(peel("<query>", n, printable(line)).text for n, line in enumerate(query.splitlines() or [""], 1))


def lookup(query: str, kb: KB, matcher) -> Found:
    """A code or slug; else the codes errmap's matcher gives the text read as a log, root cause
    first; else the entry whose words the query holds; else none, with the closest codes."""
    import difflib

    from errmap.scan.scanner import scan_chunks
    from errmap.scan.parallel import feed
    from errmap.scan.triage import Triage

    if (e := kb.get(query)) is not None or (e := kb.get(query.strip().lower().replace(" ", "-"))) is not None:
        return Found(e, "code")  # a code, a slug, or a slug written with spaces ("nccl error")
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
    text = read_as_scan(query)
    if (e := start_of_message(text, kb)) is not None:
        return Found(e, "start")
    token = text.strip().lower()
    if token and " " not in token:
        near = difflib.get_close_matches(token, [e.slug for e in kb], n=3, cutoff=0.6)
        if near:
            return Found(None, "", tuple(kb.get(s) for s in near))
    scored = by_words(text, kb)
    if scored and scored[0][0] >= WORDS_NEEDED and (len(scored) == 1 or scored[0][0] > scored[1][0]):
        return Found(scored[0][1], "words", tuple(e for score, e in scored[1:3] if score >= WORDS_NEEDED))
    words = set(_words(text))
    named = [e for _, e in scored if words and all(any(x.startswith(w) for x in _name(e)) for w in words)]
    return Found(None, "", tuple(named[:NAMED] if len(named) > SUGGESTED else [e for _, e in scored[:SUGGESTED]]))


def print_entry(con: Console, e: Entry, kb: KB | None = None, matcher=None) -> None:
    example = find_example(e, matcher, fixtures_dir()) if matcher is not None else None
    probes, checks = probe_lines(e)
    rules = doctor_lines(e)

    def means() -> None:
        block(con, "  ", escape(e.summary))
        if e.applies_to:
            block(con, f"  [dim]{lead(_('Applies to:'))}[/]", escape(e.applies_to))

    def fix() -> None:
        steps = e.numbered_steps(language())  # numbered as scan numbers them
        digits = len(str(len(steps)))
        for i, step, stack in steps:
            releases = getattr(step, "releases", "").replace(", ", _(", "))  # a specifier holds no ", "
            what = [x for x in (stack, gpus.label(step.gpu) if getattr(step, "gpu", ()) else "", releases) if x]
            when = f"[dim]{_('({what}) ').format(what=escape(_('; ').join(what)))}[/]" if what else ""
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
            block(con, f"  [cyan]{name}[/]{_(': ')}", escape(_(what)))
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
        "example": f"[dim]{aside(escape(example.path) + _(', ') + escape(_(example.origin or 'source not recorded')))}[/]" if example else "",
        "confirms": f"[dim]{aside('errmap scan --probe')}[/]" if probes else "",
    }
    block(con, f"[bold red]{e.errno}[/] ", f"[bold]{escape(e.title)}[/]  [dim]{e.slug} · {escape(e.group)} · {_(e.role)}[/]")
    for key, heading in HEADINGS.items():
        con.print()
        block(con, "", f"[bold]{_(heading)}[/]{extra.get(key, '')}")
        body[key]()
    if url := docs_url(e.errno):
        con.print()
        block(con, f"[dim]{lead(_('docs') + _(':'))}[/]", escape(url))
