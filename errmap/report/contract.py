"""Reports: diagnoses as the JSON contract and as one screen of text.

Renderers only format; `diagnose` decides what a diagnosis says.
"""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape as _markup

from errmap.kb import gpus, versions
from errmap.kb.gpus import GPU
from errmap.report.i18n import _, ngettext, pad
from errmap.kb.load import STACKS
from errmap.report.layout import block, row
from errmap.scan.lines import Line, printable
from errmap.scan.source import InputError, Source
from errmap.kb.stacks import fitting, framework
from errmap.scan.triage import MAX_PER_CODE, MAX_RESIDUE, Incident, Residue, Triage

JSON_VERSION = 1
SHOWN_TEXT = 300  # characters of an evidence line shown in text output
SHOWN_PER_CODE = 20  # diagnoses of one code shown in text output; --verbose and JSON list all kept
SHOWN_STEPS = 3  # fix steps shown in text output; --verbose and `errmap explain` show all
SHOWN_CAUSE = 3  # lines of the cause shown in text output, cut with an ellipsis; --verbose shows it whole
SHOWN_LINKS = 1  # links shown in text output; --verbose shows all
SCREEN_ROWS = 24  # a diagnosis with what it led to fits one screen of this height: fewer steps where long ones need it
FEWEST_STEPS = 2  # ... but never fewer than these


def escape(text: str) -> str:
    """Text from a log, a path or a KB as rich markup: no markup, no terminal escape or control character."""
    return _markup(printable(text))


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


def _evidence(line: Line) -> dict[str, Any]:
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
    steps = gpus.fitting(fitting(e.fix, stack), gpu)
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
        "last_line": inc.last.lineno if inc.last else inc.first.lineno,
        "count": inc.count,
        "ranks": sorted(inc.ranks),
        "hosts": sorted(inc.hosts),
        "files": list(inc.files),
        "evidence": [_evidence(line) for line in inc.evidence],
        "captures": caps,
        "summary": e.summary,
        "cause": e.fill(e.cause, values),
        "run": inc.run or None,
        "framework": stack,
        "gpu": gpu.to_json() if gpu else None,
        "fix": [e.fill(step.text, values) for step in steps if holds_for(step, have)],
        # the steps for other releases than the run's (shown with -v, marked)
        "fix_other_versions": [{"text": e.fill(step.text, values), "versions": dict(step.versions)}
                               for step in steps if not holds_for(step, have)],
        "links": [{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(link).items() if v not in (None, ())}
                  for link in links],
        "upgrade": upgrades(links, have),
        "caused_by": inc.cause.entry.errno if inc.cause else None,
        "consequences": [c.entry.errno for c in inc.consequences],
        "docs": docs_url(e.errno),
    }


def _residue(r: Residue) -> dict[str, Any]:
    return {"type": r.type, "message": r.message, "count": r.count, **_evidence(r.first)}


@dataclass
class Report:
    sources: list[Source]
    triage: Triage
    errors: list[InputError] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # per-errno additions, e.g. probe verdicts
    status: int | None = None  # `errmap run`: the command's exit status (128+N for signal N)
    forced: bool = False  # `errmap run` killed the command itself, after a second Ctrl-C
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
        if self.forced:
            out["killed_by_errmap"] = True
        elif out.get("signal") in self.exits and not self.triage.incidents:
            out["likely"] = self.exits[out["signal"]][0]
        return out

    def ranked(self) -> list[tuple[Incident, dict[str, Any]]]:
        out = []
        of_run: dict[str, GPU | None] = {}
        for inc in self.triage.ranked():
            if inc.run not in of_run:
                of_run[inc.run] = self.gpu(inc.run)
            d = diagnose(inc, self.framework(inc.files), of_run[inc.run], self.versions(inc.run))
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
        if self.errors:
            return 2
        return 1 if self.triage.incidents or self.triage.residue else 0

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
        }


# ---------------------------------------------------------------- text


def _where(ev: dict[str, Any]) -> str:
    """'train.log:12 (rank 3, WorkerDict pid=77, 10.0.0.1)' from an evidence dict."""
    who = []
    if ev.get("rank") is not None:
        who.append(f"rank {ev['rank']}")
    if ev.get("actor") or ev.get("pid"):
        who.append(" ".join(str(x) for x in (ev.get("actor"), ev.get("pid") and f"pid={ev['pid']}") if x))
    if ev.get("host"):
        who.append(ev["host"])
    return f"{ev['file']}:{ev['line']}" + (f" ({', '.join(who)})" if who else "")


def _spread(d: dict[str, Any]) -> str:
    parts = [_("{n}x").format(n=d["count"]) if d["count"] > 1 else _("once")]
    if d["ranks"]:
        ranks = d["ranks"]
        parts.append(_("rank {rank}").format(rank=ranks[0]) if len(ranks) == 1 else _("{n} ranks").format(n=len(ranks)))
    if len(d["files"]) > 1:
        parts.append(_("{n} files").format(n=len(d["files"])))
    return _(", ").join(parts)


def lead(text: str) -> str:
    """A label and the space before what it labels; none after a full-width colon."""
    return text if text.endswith("：") else text + " "


def aside(text: str) -> str:
    """' (text)' after what it qualifies; in Chinese, full-width parentheses and no space."""
    return _(" ({what})").format(what=text)


def rows(con: Console, draw: Callable[[Console], None]) -> int:
    """How many rows `draw` prints at `con`'s width."""
    probe = Console(file=io.StringIO(), width=con.width, highlight=False, soft_wrap=True, color_system=None)
    draw(probe)
    return probe.file.getvalue().count("\n")


def print_diagnosis(con: Console, d: dict[str, Any], n: int | None = None, brief: bool = False, verbose: bool = False,
                    room: int = SCREEN_ROWS, steps: int = SHOWN_STEPS) -> None:
    """One diagnosis: header, evidence, cause, fix, links; by default in `room` rows (SHOWN_CAUSE lines
    of cause, SHOWN_STEPS steps or as many as fit, one link), all of it with `verbose`."""
    if not (brief or verbose) and steps > FEWEST_STEPS and room > 0 and rows(con, lambda c: print_diagnosis(c, d, n, room=0, steps=steps)) > room:
        return print_diagnosis(con, d, n, room=room, steps=steps - 1)
    role = "" if d["role"] == "root" else f"[dim]{aside(_('consequence'))}[/]"
    if d["confidence"] == "likely":  # found by the words of its family, not by a known message
        role += f"[yellow]{aside(_('likely: {words}').format(words=' + '.join(d['hint'])))}[/]"
    block(con, f"[bold]{n}.[/] " if n else "",
          f"[bold red]{d['errno']}[/] [bold]{escape(d['title'])}[/]{role}  [dim]{d['slug']} · {_spread(d)}[/]")
    ev = d["evidence"][0]
    text = ev["message"].strip()
    block(con, "   ", f"[cyan]{escape(_where(ev))}[/]")
    if verbose:
        block(con, "   [dim]│[/] ", escape(text if len(text) <= SHOWN_TEXT else text[:SHOWN_TEXT] + " …"))
    else:
        row(con, f"   [dim]│[/] {escape(text)}")
    if "verdict" in d:
        colour = {"confirmed": "green", "refuted": "yellow"}.get(d["verdict"], "dim")
        why = "; ".join(d.get("verdict_reasons", [])) or _("no probe could decide")
        block(con, f"   [bold {colour}]{_(d['verdict'])}[/]: ", escape(why))
        if d.get("facts"):
            from errmap.probes.base import short

            shown = [f"{k}={short(v['value'], 80)}" if "value" in v else f"{k}=unknown" for k, v in d["facts"].items()]
            block(con, f"   [dim]{lead(_('facts:'))}[/]", f"[dim]{escape('; '.join(shown))}[/]")
    more = d["docs"] or f"errmap explain {d['errno']}"
    if brief:
        block(con, f"   [dim]{lead(_('more:'))}[/]", f"[dim]{escape(more)}[/]")
        return
    links = d["links"] if verbose else d["links"][:SHOWN_LINKS]
    label = max(cell_len(x) for x in (_("Cause"), _("Fix"), *(_(link["kind"]) for link in links)))
    block(con, f"   [bold]{pad(_('Cause'), label)}[/]  ", escape(d["cause"]), None if verbose else SHOWN_CAUSE)
    shown = d["fix"] if verbose else d["fix"][:steps]
    for i, step in enumerate(shown, 1):
        block(con, f"   [bold]{pad(_('Fix') if i == 1 else '', label)}[/]  {i:>{len(str(len(shown)))}}. ", escape(step))
    if verbose:  # the steps for other releases than this run's
        for other in d.get("fix_other_versions", ()):
            only = ", ".join(f"{p} {spec}".strip() for p, spec in other["versions"].items())
            block(con, f"   {pad('', label)}  [dim]{aside(_('for {releases} only').format(releases=only)).strip()}[/] ",
                  f"[dim]{escape(other['text'])}[/]")
    for link in links:
        kind = f"   [dim]{pad(_(link['kind']), label)}[/]  "
        state = f"{link_state(link)} · " if link_state(link) else ""
        if verbose:
            block(con, kind, f"{escape(link['url'])}  [dim]{escape(state + link['title'])}[/]")
        else:  # one row: the whole URL, its title cut to what is left
            block(con, f"{kind}{escape(link['url'])}  ", f"[dim]{escape(state + link['title'])}[/]", 1)
    for up in d.get("upgrade", ()):
        block(con, "   ", "[yellow]" + escape(_("This run has {package} {version}; fixed in {fixed_in}: upgrade.").format(**up)) + "[/]")
    left = len(d["fix"]) - len(shown)
    hidden = f"[dim]{aside(ngettext('{n} more step', '{n} more steps', left).format(n=left))}[/]" if left else ""
    block(con, f"   [dim]{lead(_('more:'))}[/]", escape(more) + hidden)


def print_report(con: Console, report: Report, verbose: bool = False, summary: bool = False) -> None:
    """The whole report; `summary` keeps every diagnosis to its header (watch and run already printed them)."""
    for err in report.errors:  # the common reasons are in the catalogue (JSON keeps them in English)
        block(con, "[bold red]errmap:[/] ", f"{escape(err.path)}{_(': ')}{escape(_(err.reason))}")
    for s in report.sources:
        if s.warning:
            block(con, "[yellow]errmap:[/] ", f"{escape(s.path)}: {escape(s.warning)}")
    ranked = report.ranked()
    residue = report.triage.unrecognized()
    read = [s for s in report.sources if not s.error]
    lines = sum(s.lines for s in read)
    scanned = (ngettext("{n} file", "{n} files", len(read)).format(n=len(read)) + _(", ")
               + ngettext("{lines:,} line", "{lines:,} lines", lines).format(lines=lines))
    cmd = report.command()
    if cmd and cmd["status"]:
        how = "" if "signal" not in cmd else (_(" (killed by {signal} after a second Ctrl-C)") if cmd.get("killed_by_errmap")
                                              else _(" (killed by {signal})")).format(signal=cmd["signal"])
        known = _("; no known cause in its output") if not ranked else ""
        block(con, "", f"[bold red]{_('The command failed')}[/]"
              + escape(_(" with status {status}{how}{known}.").format(status=cmd["status"], how=how, known=known)))
        if "likely" in cmd:
            errno, says = report.exits[cmd["signal"]]
            block(con, f"   {lead(_('Likely cause:'))}", f"{errno} {escape(says)}")
            block(con, f"   [dim]{lead(_('more:'))}[/]", f"[dim]errmap explain {errno}[/]")
    if not ranked and not residue and report.errors:
        n = len(report.errors)
        also = f"[dim]{aside(_('{scanned} read').format(scanned=scanned))}[/]" if read else ""
        block(con, f"[bold red]{lead(_('Nothing diagnosed:'))}[/]",
              ngettext("{n} input could not be read", "{n} inputs could not be read", n).format(n=n) + also)
        return
    if not ranked and not residue:
        if not (cmd and cmd["status"]):
            block(con, "", f"[green]{_('No error found')}[/][dim]{aside(scanned)}[/]")
        return
    tops = [(inc, d) for inc, d in ranked if inc.cause is None]
    dicts = {id(inc): d for inc, d in ranked}
    runs = list(dict.fromkeys(inc.run for inc, _ in tops))
    stack = STACKS[fw] + _("; ") if len(runs) < 2 and (fw := report.framework()) else ""
    stack += escape(g.describe()) + _("; ") if len(runs) < 2 and (g := report.gpu()) else ""
    if tops:
        heading = ngettext("{n} diagnosis", "{n} diagnoses", len(tops)).format(n=len(tops))
        block(con, "", f"[bold]{heading}[/][dim]{aside(stack + scanned + _('; ') + _('root cause first'))}[/]")
        con.print()
    else:
        heading = ngettext("No known cause for {n} error", "No known cause for {n} errors", len(residue)).format(n=len(residue))
        block(con, "", f"[bold]{heading}[/][dim]{aside(stack + scanned)}[/]")
        con.print()
    shown: dict[int, int] = {}
    for n, (inc, d) in enumerate(tops, 1):
        shown[d["errno"]] = shown.get(d["errno"], 0) + 1
        if shown[d["errno"]] > SHOWN_PER_CODE and not verbose:
            continue
        opens = n == 1 or inc.run != tops[n - 2][0].run
        if len(runs) > 1 and opens:
            files = [s.path for s in report.sources if s.run == inc.run]
            more_files = ngettext("and {n} more file", "and {n} more files", len(files) - 1).format(n=len(files) - 1)
            what = _(", ").join(x for x in (STACKS.get(d["framework"] or ""), (d["gpu"] or {}).get("name", ""), files[0] if files else "",
                                            more_files if len(files) > 1 else "") if x)
            run = _("Run {k} of {n}").format(k=runs.index(inc.run) + 1, n=len(runs))
            block(con, f"[bold]{run}[/] ", f"[dim]{aside(escape(what)).lstrip()}[/]")
        led = rows(con, lambda c: _print_consequences(c, inc, dicts))
        print_diagnosis(con, d, n, brief=summary or (not opens and not verbose), verbose=verbose, room=SCREEN_ROWS - led)
        _print_consequences(con, inc, dicts)
        con.print()
    for errno, k in shown.items():
        if k > SHOWN_PER_CODE and not verbose:
            more = _("… {n} more diagnoses of {errno} with other values (--verbose or --format json lists them)")
            block(con, "", f"[dim]{more.format(n=k - SHOWN_PER_CODE, errno=errno)}[/]")
    if residue:
        shown = residue if verbose or not tops else residue[:3]
        label = _("Errors not in the knowledge base") if not tops else _("Also seen, not in the knowledge base")
        block(con, "", f"[bold]{label}[/][dim]{aside(str(len(residue)))}[/]")
        for r in shown:
            count = f"[dim]{aside(_('{n}x').format(n=r.count))}[/]" if r.count > 1 else ""
            seen = f"[cyan]{escape(_where(_evidence(r.first)))}[/]{count}  {escape(r.first.text.strip()[:SHOWN_TEXT])}"
            block(con, "   ", seen) if verbose or not tops else row(con, f"   {seen}")  # one row beside diagnoses
        if len(shown) < len(residue):
            block(con, "   ", f"[dim]{_('… {n} more (--verbose lists them)').format(n=len(residue) - len(shown))}[/]")
    _print_omitted(con, report.triage)
    if len(tops) > 1 and not verbose and not summary:
        block(con, "", f"[dim]{_('Diagnoses after the first are brief; --verbose shows each in full, `errmap explain N` one.')}[/]")


def _print_omitted(con: Console, triage: Triage) -> None:
    """What the caps on kept incidents and records left out, as counts."""
    for errno, n in sorted(triage.more.items()):
        more = ngettext("… and {n:,} more line of {errno} with other values (only the first {kept} incidents of a code are kept)",
                        "… and {n:,} more lines of {errno} with other values (only the first {kept} incidents of a code are kept)", n)
        block(con, "", f"[dim]{more.format(n=n, errno=errno, kept=MAX_PER_CODE)}[/]")
    if triage.more_residue:
        n = triage.more_residue
        more = ngettext("… and {n:,} more unrecognized error line (only the first {kept} distinct ones are kept)",
                        "… and {n:,} more unrecognized error lines (only the first {kept} distinct ones are kept)", n)
        block(con, "", f"[dim]{more.format(n=n, kept=MAX_RESIDUE)}[/]")


def _print_consequences(con: Console, inc: Incident, dicts: dict[int, dict[str, Any]], depth: int = 1) -> None:
    for c in inc.consequences:
        cd = dicts[id(c)]
        block(con, f"   {'   ' * (depth - 1)}[dim]└─ {_('led to')}[/] ",
              f"{cd['errno']} {escape(cd['title'])}"
              f"[dim]{aside(_spread(cd) + _('; ') + _('first at {where}').format(where=escape(_where(cd['evidence'][0]))))}[/]")
        _print_consequences(con, c, dicts, depth + 1)
