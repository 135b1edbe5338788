"""Incidents: matches grouped by code and fingerprint, then ranked root cause first.

The same error from eight ranks is one incident with eight sources. A consequence code (NCCL
watchdog timeout, dead Ray actor, torchrun ChildFailedError) ranks below every root code and is
folded under the root cause that the KB says can cause it, found in the same run: files of separate
runs (runs.py) never share an incident or a cause.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from dataclasses import dataclass, field, replace

import regex

from errmap.kb.model import Entry
from errmap.scan.lines import Line
from errmap.scan.events import Event, GpuNamed, Match, Named, Release, Unrecognized
from errmap.scan.failures import INTERRUPT, aborting
from errmap.scan.runs import ray_own

MAX_EVIDENCE = 5
# What a triage keeps is bounded whatever the log holds; what it drops it counts.
MAX_PER_CODE = 1000  # incidents kept per code; lines of further distinct incidents are counted
MAX_RESIDUE = 100  # distinct unrecognized records kept; lines of further ones are counted
KEPT_TEXT = 4000  # characters kept of a line, a message or a capture
_NUMBERS = regex.compile(r"\d+")
_TYPE_COLON = regex.compile(r"(\w+):")


def residue_key(event: Unrecognized) -> tuple[str, str]:
    """What tells unrecognized records apart: their type and message, numbers aside."""
    return event.type[:200], _NUMBERS.sub("N", event.message[:200])


def digest(key: tuple[str, str]) -> bytes:
    return hashlib.blake2b("\0".join(key).encode("utf-8", "replace"), digest_size=DIGEST).digest()


DIGEST = 8  # bytes of a record key's digest in Again


@dataclass(slots=True)
class Again:
    """Unrecognized lines, one after another, that a worker process sends by their records' keys only: each record's
    first line went before, or so many other records did that it cannot be kept (scan._Packer). `lines` holds, for
    each line, its key's digest and its repeat count (4 bytes, little-endian)."""

    lines: bytes

    def __iter__(self) -> Iterator[tuple[bytes, int]]:
        step = DIGEST + 4
        for i in range(0, len(self.lines), step):
            yield self.lines[i:i + DIGEST], int.from_bytes(self.lines[i + DIGEST:i + step], "little")


def clip(text: str) -> str:
    return text if len(text) <= KEPT_TEXT else text[:KEPT_TEXT] + " …"


def kept(line: Line) -> Line:
    """The line as a triage keeps it: its text cut to KEPT_TEXT characters (then marked cut)."""
    if len(line.raw) <= KEPT_TEXT and len(line.text) <= KEPT_TEXT:
        return line
    return replace(line, raw=clip(line.raw), text=clip(line.text), cut=True)


@dataclass
class Incident:
    entry: Entry
    fingerprint: tuple  # (run, errno, key captures...)
    captures: dict[str, str]
    order: int  # position of the first match among all events: earlier is more likely the cause
    evidence: list[Line] = field(default_factory=list)
    count: int = 0
    last: Line | None = None
    until: int = 0  # the number of the last line in the file of the first (`last` may be in another file)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    files: dict[str, None] = field(default_factory=dict)  # in order of appearance
    cause: Incident | None = None  # for a consequence: the root incident it is folded under
    words: tuple[str, ...] | None = None  # only likely matches so far (the words of its family, readings.hinted)
    consequences: list[Incident] = field(default_factory=list)

    @property
    def run(self) -> str:
        return self.fingerprint[0]

    @property
    def first(self) -> Line:
        return self.evidence[0]

    @property
    def confidence(self) -> str:
        return "exact" if self.words is None else "likely"

    def add(self, line: Line) -> None:
        self.count += line.repeat
        if not self.evidence or line.path == self.evidence[0].path:
            self.until = line.lineno
        self.last = line
        if len(self.evidence) < MAX_EVIDENCE:
            self.evidence.append(kept(line))
        if line.rank is not None:
            self.ranks.add(line.rank)
        if line.host:
            self.hosts.add(line.host)
        self.files[line.path] = None


@dataclass
class Residue:
    """Unrecognized failure lines, grouped by their type and message."""

    type: str
    message: str
    first: Line
    order: int
    inner: str | None = None
    count: int = 0
    weak: bool = False  # of a weak shape (failures.py): shown only where nothing stronger is

    @property
    def interrupt(self) -> bool:
        """A user's Ctrl-C (KeyboardInterrupt): how the run ended, not a failure."""
        return self.type == INTERRUPT

    @property
    def abort(self) -> bool:
        """A process's abort (failures.ABORTS): the end of a failure, not one of its own where one is known."""
        return aborting(self.type, self.message)


@dataclass
class Triage:
    incidents: dict[tuple, Incident] = field(default_factory=dict)
    residue: dict[tuple, Residue] = field(default_factory=dict)
    more: dict[int, int] = field(default_factory=dict)  # errno -> lines of incidents past MAX_PER_CODE
    more_residue: int = 0  # lines of unrecognized records past MAX_RESIDUE
    stacks: dict[str, set[str]] = field(default_factory=dict)  # file -> the stacks its lines name
    runs: dict[str, str] = field(default_factory=dict)  # file -> its run (Source.run); absent: run ""
    gpus: dict[str, tuple[int, str]] = field(default_factory=dict)  # file -> (line, name) of the first line naming a GPU
    releases: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)  # file -> package -> (version, line)
    _per_code: dict[int, int] = field(default_factory=dict)
    _by_digest: dict[bytes, Residue] = field(default_factory=dict)  # residue by its key's digest (Again)
    _events: int = 0

    def add(self, event: Event) -> Incident | Residue | None:
        """Record one event; return the incident or residue if this event opened it."""
        if isinstance(event, Named):
            self.stacks.setdefault(event.line.path, set()).add(event.stack)
            return None
        if isinstance(event, GpuNamed):
            self.gpus.setdefault(event.line.path, (event.line.lineno, event.name))
            return None
        if isinstance(event, Release):
            self.releases.setdefault(event.line.path, {}).setdefault(event.package, (event.version, event.line.lineno))
            return None
        if isinstance(event, Again):
            for d, repeat in event:  # as add() of each line: counted with its kept record, else past the cap
                self._events += 1
                if (r := self._by_digest.get(d)) is not None:
                    r.count += repeat
                else:
                    self.more_residue += repeat
            return None
        self._events += 1
        if isinstance(event, Unrecognized):
            key = residue_key(event)
            r = self.residue.get(key)
            if r is None:
                if len(self.residue) >= MAX_RESIDUE:
                    self.more_residue += event.line.repeat
                    return None
                r = self.residue[key] = Residue(clip(event.type), clip(event.message), kept(event.line), self._events,
                                                event.inner and clip(event.inner), weak=event.weak)
                self._by_digest[digest(key)] = r
                r.count = event.line.repeat
                return r
            r.count += event.line.repeat
            return None
        return self._add_match(event)

    def _add_match(self, m: Match) -> Incident | None:
        e = m.entry
        caps = {k: clip(v) for k, v in m.captures.items()}
        fp = (self.runs.get(m.line.path, ""), e.errno, *(caps.get(k) for k in e.key))
        inc = self.incidents.get(fp)
        fresh = inc is None
        if inc is None:
            if self._per_code.get(e.errno, 0) >= MAX_PER_CODE:
                self.more[e.errno] = self.more.get(e.errno, 0) + m.line.repeat
                return None
            self._per_code[e.errno] = self._per_code.get(e.errno, 0) + 1
            inc = self.incidents[fp] = Incident(e, fp, caps, self._events, words=m.words if m.anchor is None else None)
        else:
            if m.anchor is not None:
                inc.words = None  # an anchor matched too: exact
            for k, v in caps.items():  # a later variant may carry values the first lacked
                inc.captures.setdefault(k, v)
        inc.add(m.line)
        return inc if fresh else None

    def ranked(self) -> list[Incident]:
        """Root causes by first appearance, each with what it led to; then unexplained consequences.

        An incident whose KB entry names causes (`caused_by`) is folded under the earliest incident of
        such a cause found anywhere in the logs: ranks interleave their output, and a cause's detail
        line may follow the generic error it explains (NCCL's "Last error:" after "NCCL error in:").
        """
        said = _said(self.incidents.values())
        incidents = sorted((i for i in self.incidents.values() if _tells(i, said)), key=lambda i: i.order)
        for inc in incidents:
            inc.cause, inc.consequences = None, []
        roots: dict[tuple, list[Incident]] = {}  # (run, errno) -> its root incidents, earliest first
        for inc in incidents:
            if inc.entry.role == "root":
                roots.setdefault((inc.run, inc.entry.errno), []).append(inc)
        for inc in incidents:
            causes = (next((r for r in roots.get((inc.run, c), ()) if not _under(r, inc)), None) for c in inc.entry.caused_by)
            cause = min((r for r in causes if r is not None), key=lambda r: r.order, default=None)
            if cause is not None:
                inc.cause = cause
                cause.consequences.append(inc)
        # A failure known only from a traceback's frames (its message line cut) ranks after failures
        # whose message was read, one printed only inside INFO/WARNING records (a skipped step) after
        # failures printed as errors, one found only in the logs of Ray's own processes (the raylet, the
        # dashboard agent: housekeeping Ray survives, such as an agent's port taken by another node's on
        # the same host) after failures in the job's output; otherwise the earliest comes first. Runs come
        # in the order of their first incident, each with its own.
        first: dict[str, int] = {}
        for inc in incidents:
            first.setdefault(inc.run, len(first))
        top = sorted((i for i in incidents if i.entry.role == "root" and i.cause is None),
                     key=lambda i: (first[i.run], i.words is not None, all(x.frame for x in i.evidence), all(x.quiet for x in i.evidence),
                                    all(ray_own(f) for f in i.files), i.order))
        loose = sorted((i for i in incidents if i.entry.role == "consequence" and i.cause is None), key=lambda i: first[i.run])
        return [x for r in top for x in (r, *_descendants(r))] + loose

    def shown(self, inc: Incident) -> bool:
        """Whether ranked() lists `inc` (watch and run ask as each incident opens)."""
        return _tells(inc, _said(self.incidents.values()))

    def cause_of(self, inc: Incident) -> Incident | None:
        """The earliest root incident of `inc`'s run that the KB says can cause it (what ranked() folds it under)."""
        return min((i for i in self.incidents.values() if i.run == inc.run and i.entry.role == "root"
                    and i.entry.errno in inc.entry.caused_by), key=lambda i: i.order, default=None)

    def unrecognized(self) -> list[Residue]:
        """Residue in order, without wrappers (`RayTaskError(KeyError): ...`) whose wrapped error was diagnosed, nor
        a user's interrupts (`interrupted`)."""
        diagnosed = {t for inc in self.incidents.values() for line in inc.evidence for t in _TYPE_COLON.findall(line.text)}
        # weak shapes are evidence only where nothing else is (a launcher killing its ranks on Ctrl-C says no more)
        weak = not self.incidents and all(r.weak for r in self.residue.values())
        return sorted(
            (r for r in self.residue.values() if (weak or not r.weak) and not r.interrupt
             and not (r.inner and r.inner.rsplit(".", 1)[-1] in diagnosed) and self.ended(r) is None),
            key=lambda r: r.order,
        )

    def ended(self, r: Residue) -> Incident | None:
        """The known failure whose process an abort line (Residue.abort) ends: the earliest incident of the same run
        with evidence from the same file and process (its pid, actor, rank and host, as far as the line names them)."""
        if not r.abort:
            return None
        line, run = r.first, self.runs.get(r.first.path, "")
        same = lambda e: e.path == line.path and all(  # noqa: E731
            getattr(line, k) is None or getattr(e, k) == getattr(line, k) for k in ("pid", "actor", "rank", "host"))
        return min((i for i in self.incidents.values() if i.run == run and any(same(e) for e in i.evidence)),
                   key=lambda i: i.order, default=None)

    def interrupted(self) -> Residue | None:
        """The first sign that a user stopped the run with Ctrl-C (a traceback ending in KeyboardInterrupt)."""
        return min((r for r in self.residue.values() if r.interrupt), key=lambda r: r.order, default=None)


def _said(incidents) -> tuple[set[str], set[tuple[str, int]]]:
    """The runs with a root cause, and the (run, code) pairs an anchor matched."""
    return ({i.run for i in incidents if i.entry.role == "root"},
            {(i.run, i.entry.errno) for i in incidents if i.words is None})


def _tells(inc: Incident, said: tuple[set[str], set[tuple[str, int]]]) -> bool:
    """Whether an incident says something: not when known only by the words of its family (likely) and it is a
    consequence in a run with a root cause, or its code matched exactly in its run (a wrapper's header,
    `RayTaskError(ModuleNotFoundError)`, beside the error it wraps)."""
    rooted, exact = said
    return inc.words is None or not (inc.entry.role == "consequence" and inc.run in rooted
                                     or (inc.run, inc.entry.errno) in exact)


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
