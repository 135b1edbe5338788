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


def scan_source(matcher: Matcher, source: Source, triage: Triage, on_new: OnNew | None = None) -> None:
    """Stream one source into the triage; record an input error on the source instead of raising."""
    scanner: Scanner = matcher.scanner(source.path)
    last = b"\n"
    try:
        for chunk in source.chunks():
            last = chunk[-1:] or last
            feed(triage, scanner.feed(chunk), on_new)
    except InputError as exc:
        source.error = exc.reason
    feed(triage, scanner.finish(), on_new)
    source.lines = scanner.lineno - (1 if last in (b"\n", b"") else 0)


def scan(matcher: Matcher, sources: list[Source], errors: list[InputError]) -> Report:
    triage = Triage()
    for source in sources:
        scan_source(matcher, source, triage)
    errors = errors + [InputError(s.path, s.error) for s in sources if s.error]
    return Report(sources, triage, errors)
