"""Incidents: matches grouped by code and fingerprint, then ranked root cause first.

The same error from eight ranks is one incident with eight sources. A consequence code (NCCL
watchdog timeout, dead Ray actor, torchrun ChildFailedError) ranks below every root code and is
folded under the root cause that the KB says can cause it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import regex

from errmap.kb import Entry
from errmap.lines import Line
from errmap.matcher import Event, Match, Unrecognized

MAX_EVIDENCE = 5
_NUMBERS = regex.compile(r"\d+")


@dataclass
class Incident:
    entry: Entry
    fingerprint: tuple
    captures: dict[str, str]
    order: int  # position of the first match among all events: earlier is more likely the cause
    evidence: list[Line] = field(default_factory=list)
    count: int = 0
    last: Line | None = None
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    files: list[str] = field(default_factory=list)
    cause: Incident | None = None  # for a consequence: the root incident it is folded under
    consequences: list[Incident] = field(default_factory=list)

    @property
    def first(self) -> Line:
        return self.evidence[0]

    def add(self, line: Line) -> None:
        self.count += line.repeat
        self.last = line
        if len(self.evidence) < MAX_EVIDENCE:
            self.evidence.append(line)
        if line.rank is not None:
            self.ranks.add(line.rank)
        if line.host:
            self.hosts.add(line.host)
        if line.path not in self.files:
            self.files.append(line.path)


@dataclass
class Residue:
    """Unrecognized failure lines, grouped by their type and message."""

    type: str
    message: str
    first: Line
    order: int
    inner: str | None = None
    count: int = 0


@dataclass
class Triage:
    incidents: dict[tuple, Incident] = field(default_factory=dict)
    residue: dict[tuple, Residue] = field(default_factory=dict)
    _events: int = 0

    def add(self, event: Event) -> Incident | Residue | None:
        """Record one event; return the incident or residue if this event opened it."""
        self._events += 1
        if isinstance(event, Unrecognized):
            key = (event.type, _NUMBERS.sub("N", event.message[:200]))
            fresh = key not in self.residue
            if fresh:
                self.residue[key] = Residue(event.type, event.message, event.line, self._events, event.inner)
            self.residue[key].count += event.line.repeat
            return self.residue[key] if fresh else None
        return self._add_match(event)

    def _add_match(self, m: Match) -> Incident | None:
        e = m.entry
        fp = (e.errno, *(m.captures.get(k) for k in e.key))
        inc = self.incidents.get(fp)
        fresh = inc is None
        if inc is None:
            inc = self.incidents[fp] = Incident(e, fp, dict(m.captures), self._events)
        else:
            for k, v in m.captures.items():  # a later variant may carry values the first lacked
                inc.captures.setdefault(k, v)
        inc.add(m.line)
        return inc if fresh else None

    def ranked(self) -> list[Incident]:
        """Root causes by first appearance, each with what it led to; then unexplained consequences.

        An incident whose KB entry names causes (`caused_by`) is folded under the earliest incident of
        such a cause found anywhere in the logs: ranks interleave their output, and a cause's detail
        line may follow the generic error it explains (NCCL's "Last error:" after "NCCL error in:").
        """
        incidents = sorted(self.incidents.values(), key=lambda i: i.order)
        for inc in incidents:
            inc.cause, inc.consequences = None, []
        roots = [i for i in incidents if i.entry.role == "root"]
        for inc in incidents:
            for r in roots:
                if r.entry.errno in inc.entry.caused_by and not _under(r, inc):
                    inc.cause = r
                    r.consequences.append(inc)
                    break
        # A failure known only from a traceback's frames (its message line cut) ranks after failures
        # whose message was read, one printed only inside INFO/WARNING records (a skipped step) after
        # failures printed as errors; otherwise the earliest comes first.
        top = sorted((i for i in roots if i.cause is None),
                     key=lambda i: (all(x.frame for x in i.evidence), all(x.quiet for x in i.evidence), i.order))
        loose = [i for i in incidents if i.entry.role == "consequence" and i.cause is None]
        return [x for r in top for x in (r, *_descendants(r))] + loose

    def unrecognized(self) -> list[Residue]:
        """Residue in order, without wrappers (`RayTaskError(KeyError): ...`) whose wrapped error was diagnosed."""
        diagnosed = " ".join(line.text for inc in self.incidents.values() for line in inc.evidence)
        return sorted(
            (r for r in self.residue.values() if not (r.inner and f"{r.inner.rsplit('.', 1)[-1]}:" in diagnosed)),
            key=lambda r: r.order,
        )


def _under(inc: Incident, ancestor: Incident) -> bool:
    """Whether `inc` is `ancestor` or is already folded beneath it (no cycles of causes)."""
    while inc is not None:
        if inc is ancestor:
            return True
        inc = inc.cause
    return False


def _descendants(inc: Incident) -> list[Incident]:
    out = []
    for c in inc.consequences:
        out += [c, *_descendants(c)]
    return out
