"""Scanning: sources through the matcher into one triage, as a report."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from errmap.matcher import Event, Matcher, Scanner
from errmap.report import Report
from errmap.source import InputError, Source
from errmap.triage import Incident, Residue, Triage

OnNew = Callable[[Incident | Residue], None]


def feed(triage: Triage, events: Iterable[Event], on_new: OnNew | None = None) -> None:
    for event in events:
        new = triage.add(event)
        if new is not None and on_new is not None:
            on_new(new)


def scan_source(matcher: Matcher, source: Source, triage: Triage, on_new: OnNew | None = None,
                echo: Callable[[bytes], None] | None = None) -> None:
    """Stream one source into the triage (passing each chunk to `echo` first); record an input error on the
    source instead of raising. Interrupted, it still reads the unfinished last line and counts the lines."""
    scanner: Scanner = matcher.scanner(source.path)
    last, unread = b"\n", b""
    try:
        for chunk in source.chunks():
            unread, last = chunk, chunk[-1:] or last
            if echo is not None:
                echo(chunk)
            feed(triage, scanner.feed(chunk), on_new)
            unread = b""
    except InputError as exc:
        source.error = exc.reason
    finally:
        if unread:  # interrupted between reading a chunk and matching it
            feed(triage, scanner.feed(unread), on_new)
        feed(triage, scanner.finish(), on_new)
        source.lines = scanner.lineno - (1 if last in (b"\n", b"") else 0)


def scan(matcher: Matcher, sources: list[Source], errors: list[InputError]) -> Report:
    triage = Triage()
    for source in sources:
        scan_source(matcher, source, triage)
    errors = errors + [InputError(s.path, s.error) for s in sources if s.error]
    return Report(sources, triage, errors)
