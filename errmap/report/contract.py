"""The report: a scan's incidents as diagnoses, in the JSON contract every output renders.

`diagnose` decides what a diagnosis says; text.py and the machine formats (dumps, sarif, github) only
format it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from errmap.kb import gpus, versions
from errmap.kb.gpus import GPU
from errmap.kb.stacks import fitting, framework
from errmap.report.i18n import _
from errmap.scan.lines import Line
from errmap.scan.source import InputError, Source
from errmap.scan.triage import Incident, Residue, Triage

JSON_VERSION = 1
INTERRUPTED = 128 + signal.SIGINT  # the exit status of a run the user stopped with Ctrl-C, as shells report it


def docs_url(errno: int) -> str | None:
    """The docs page of a code: under ERRMAP_DOCS_URL when the user has set a base URL, else the
    page in the site built in this checkout (`errmap docs build`), else none."""
    base = os.environ.get("ERRMAP_DOCS_URL", "").rstrip("/")
    if base:
        return f"{base}/errno/{errno}/"
    root = Path(__file__).resolve().parents[2]
    page = root / "site" / "errno" / str(errno) / "index.html"
    return page.as_uri() if (root / "mkdocs.yml").is_file() and page.is_file() else None


def link_state(link: Any) -> str:
    """What a link's change became, as it was seen: "fixed in vllm 0.6.5", "merged, not yet released", "proposed,
    not merged"; nothing for an issue or docs. `link`: a KB link or its JSON."""
    get = link.get if isinstance(link, dict) else lambda k: getattr(link, k, None)
    if get("kind") == "proposal":
        return _("proposed, not merged")
    if get("kind") != "fix":
        return ""
    return _("merged, not yet released") if get("released_in") == "unreleased" else \
        _("fixed in {release}").format(release=get("released_in"))


def evidence_json(line: Line) -> dict[str, Any]:
    out: dict[str, Any] = {"file": line.path, "line": line.lineno, "text": line.raw, "message": line.text}
    for name in ("rank", "actor", "pid", "host", "level", "time"):
        if (value := getattr(line, name)) is not None:
            out[name] = value
    if line.cut:
        out["cut"] = True
    return out


def holds_for(step: Any, have: dict[str, dict[str, Any]]) -> bool:
    """Whether a fix step holds for the run's releases (`have`: package -> {"version": ...}): every package it names
    a range for and the run names a release of is in that range."""
    return all(versions.holds(spec, have[p]["version"]) for p, spec in step.versions if p in have)


def upgrades(links: list[Any], have: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """The fixes released after the run's release of their package: where to upgrade to."""
    out = []
    for link in links:
        if link.kind == "fix" and link.released_in and (r := versions.release(link.released_in)) is not None:
            package, fixed = r
            if package in have and versions.parse(have[package]["version"]) < versions.parse(fixed):
                out.append({"package": package, "version": have[package]["version"], "fixed_in": fixed, "url": link.url})
    return out


def diagnose(inc: Incident, stack: str | None = None, gpu: GPU | None = None,
             have: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One incident as a diagnosis of the JSON contract, its fix steps and links for the run's `stack`,
    its texts filled and its steps chosen with what is known of the run's `gpu` and of its releases (`have`)."""
    e, caps = inc.entry, inc.captures
    values = {**(gpu.values() if gpu else {}), **caps}
    have = have or {}
    steps = e.fitting_steps(stack, gpu)
    links = fitting(e.links, stack)
    return {
        "errno": e.errno,
        "slug": e.slug,
        "title": e.title,
        "role": e.role,
        "confidence": inc.confidence,
        **({"hint": list(inc.words)} if inc.words is not None else {}),
        "file": inc.first.path,
        "line": inc.first.lineno,
        "last_line": inc.until or inc.first.lineno,  # in "file", as "line" is
        "count": inc.count,
        "ranks": sorted(inc.ranks),
        "hosts": sorted(inc.hosts),
        "files": list(inc.files),
        "evidence": [evidence_json(line) for line in inc.evidence],
        "captures": caps,
        "summary": e.summary,
        "cause": e.fill(e.cause, values),
        "run": inc.run or None,
        "framework": stack,
        "gpu": gpu.to_json() if gpu else None,
        "fix": [e.fill(step.text, values) for _, step in steps if holds_for(step, have)],
        # each step's number: its place in the KB, as `errmap explain` and the docs number it
        "fix_numbers": [n for n, step in steps if holds_for(step, have)],
        # the steps for other releases than the run's (shown with -v, marked)
        "fix_other_versions": [{"number": n, "text": e.fill(step.text, values), "versions": dict(step.versions)}
                               for n, step in steps if not holds_for(step, have)],
        "links": [{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(link).items() if v not in (None, ())}
                  for link in links],
        "upgrade": upgrades(links, have),
        "caused_by": inc.cause.entry.errno if inc.cause else None,
        "consequences": [c.entry.errno for c in inc.consequences],
        "docs": docs_url(e.errno),
    }


ADVICE = ("cause", "fix", "fix_numbers", "fix_other_versions", "links", "upgrade")  # what lines read later may change


def changed(said: dict[str, Any], d: dict[str, Any]) -> bool:
    """Whether a diagnosis says other things than it said before (`said`): watch and run printed it live, and the
    lines after it named the run's stack, GPU or releases."""
    return any(said.get(k) != d.get(k) for k in ADVICE)


def _residue(r: Residue) -> dict[str, Any]:
    return {"type": r.type, "message": r.message, "count": r.count, **evidence_json(r.first)}


@dataclass
class Report:
    sources: list[Source]
    triage: Triage
    errors: list[InputError] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # per-errno additions, e.g. probe verdicts
    status: int | None = None  # `errmap run`: the command's exit status (128+N for signal N)
    forced: bool = False  # `errmap run` killed the command itself, after a second Ctrl-C
    interrupted: bool = False  # `errmap run`: the user pressed Ctrl-C (or SIGINT came) before the command ended
    exits: dict[str, tuple[int, str]] = field(default_factory=dict)  # signal -> (errno, says): KB.exit_causes()
    probed_gpu: GPU | None = None  # this machine's GPU as --probe read it: wins over what the logs say
    probed_versions: dict[str, str] = field(default_factory=dict)  # package -> release installed here, as --probe read it

    def command(self) -> dict[str, Any] | None:
        """How the command of `errmap run` ended; a signal that nothing in its output explains points at
        the code the KB names for it (`exits:`; SIGKILL: the host's OOM killer, 1021) as the likely cause."""
        if self.status is None:
            return None
        out: dict[str, Any] = {"status": self.status}
        if self.status > 128 and (self.status - 128) in signal.valid_signals():
            out["signal"] = signal.Signals(self.status - 128).name
        if self.interrupted or out.get("signal") == "SIGINT":
            out["interrupted"] = True
        if self.forced:
            out["killed_by_errmap"] = True
        elif out.get("signal") in self.exits and not self.triage.incidents:
            out["likely"] = self.exits[out["signal"]][0]
        return out

    def ranked(self) -> list[tuple[Incident, dict[str, Any]]]:
        out = []
        of_run: dict[str, GPU | None] = {}
        aborts: dict[int, list[Residue]] = {}  # incident id -> the abort lines of its process (Triage.ended)
        for r in sorted(self.triage.residue.values(), key=lambda r: r.order):
            if (ended := self.triage.ended(r)) is not None:
                aborts.setdefault(id(ended), []).append(r)
        for inc in self.triage.ranked():
            if inc.run not in of_run:
                of_run[inc.run] = self.gpu(inc.run)
            d = diagnose(inc, self.framework(inc.files), of_run[inc.run], self.versions(inc.run))
            d["aborts"] = [evidence_json(r.first) | {"count": r.count} for r in aborts.get(id(inc), ())]
            d.update(self.extra.get(inc.fingerprint, {}))
            out.append((inc, d))
        return out

    @property
    def diagnoses(self) -> list[dict[str, Any]]:
        return [d for _, d in self.ranked()]

    def framework(self, files: Iterable[str] | None = None) -> str | None:
        """The stack that wrote these files (all files when none are given), from what their lines name."""
        stacks = self.triage.stacks
        return framework(set().union(*(stacks.get(f, set()) for f in (stacks if files is None else files))))

    def versions(self, run: str | None = None) -> dict[str, dict[str, Any]]:
        """The releases a run's logs name (of all the logs when None), each with where it was read; --probe's
        installed releases win."""
        t = self.triage
        files = [s.path for s in self.sources if run is None or t.runs.get(s.path, "") == run]
        out: dict[str, dict[str, Any]] = {}
        for f in dict.fromkeys(files):
            for package, (version, lineno) in t.releases.get(f, {}).items():
                out.setdefault(package, {"version": version, "from": "log", "file": f, "line": lineno})
        for package, version in self.probed_versions.items():
            out[package] = {"version": version, "from": "probe"}
        return out

    def gpu(self, run: str | None = None) -> GPU | None:
        """The GPU of a run (of all the logs when None): --probe's, else the one the run's logs name."""
        if self.probed_gpu is not None:
            return self.probed_gpu
        t = self.triage
        incidents = sorted((i for i in t.incidents.values() if run is None or i.run == run), key=lambda i: i.order)
        files = [s.path for s in self.sources if run is None or t.runs.get(s.path, "") == run]
        return gpus.from_log(incidents, [(f, *t.gpus[f]) for f in dict.fromkeys(files) if f in t.gpus])

    def exit_code(self) -> int:
        """0 no error found, 1 errors diagnosed, 2 an input unread; 130 (as a shell says a Ctrl-C) a run the user
        interrupted, with no error before it."""
        if self.errors:
            return 2
        if self.triage.incidents or self.triage.unrecognized():
            return 1
        return INTERRUPTED if self.triage.interrupted() else 0

    def to_json(self) -> dict[str, Any]:
        sources = []
        for s in self.sources:
            item: dict[str, Any] = {"path": s.path, "bytes": s.bytes_read, "lines": s.lines}
            if s.warning:
                item["warning"] = s.warning
            if s.error:
                item["error"] = s.error
            sources.append(item)
        sources += [{"path": e.path, "error": e.reason} for e in self.errors if e.path not in {s.path for s in self.sources}]
        return {
            "version": JSON_VERSION,
            "framework": self.framework(),
            "gpu": g.to_json() if len({s.run for s in self.sources}) < 2 and (g := self.gpu()) else None,
            "versions": self.versions() if len({s.run for s in self.sources}) < 2 else {},
            "sources": sources,
            "diagnoses": self.diagnoses,
            "unrecognized": [_residue(r) for r in self.triage.unrecognized()],
            # lines past the caps on what is kept: of incidents past triage.MAX_PER_CODE of a code,
            # of unrecognized records past triage.MAX_RESIDUE
            "omitted": {"diagnoses": [{"errno": n, "lines": c} for n, c in sorted(self.triage.more.items())],
                        "unrecognized_lines": self.triage.more_residue},
            **({"command": cmd} if (cmd := self.command()) else {}),
            **({"interrupted": evidence_json(i.first) | {"count": i.count}} if (i := self.triage.interrupted()) else {}),
        }
