"""The terminal's text: a report's diagnoses on one screen each (header, evidence, cause, fix, links), the
run's summary line, what was left out. It renders the JSON contract (report/contract.py) and decides
nothing; layout.py wraps its rows, i18n.py gives its words."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape as _markup

from errmap.kb.stacks import name as stack_name
from errmap.report.contract import Report, changed, evidence_json, link_state
from errmap.report.i18n import _, language, ngettext, pad
from errmap.report.inert import literal, visible
from errmap.report.layout import block, row
from errmap.scan.lines import printable
from errmap.scan.source import COMMAND_OUTPUT
from errmap.scan.triage import MAX_PER_CODE, MAX_RESIDUE, Incident, Residue, Triage


SHOWN_TEXT = 300  # characters of an evidence line shown in text output


SHOWN_PER_CODE = 20  # diagnoses of one code shown in text output; --verbose and JSON list all kept


SHOWN_STEPS = 3  # fix steps shown in text output; --verbose and `errmap explain` show all


SHOWN_CAUSE = 3  # lines of the cause shown in text output, cut with an ellipsis; --verbose shows it whole


SHOWN_LINKS = 1  # links shown in text output; --verbose shows all


SHOWN_RESIDUE = 3  # unrecognized errors listed beside diagnoses; --verbose lists all


SCREEN_ROWS = 24  # the report's first diagnosis fits the first screen of this height, from the top: see `fit`


FEWEST_STEPS = 2  # steps kept before what a diagnosis led to leaves the screen


def escape(text: str) -> str:
    """Text from a log or a KB as rich markup: no markup, no terminal escape or control character, and each
    character that reorders or hides what a terminal shows (bidi controls) written as an escape."""
    return _markup(visible(printable(text)))


def escape_line(text: str) -> str:
    """A file name, or a message that is one line, as rich markup: each control character (a line break too) and
    each byte that is not UTF-8 written as an escape, so the name reads as it is and starts no line of its own."""
    return _markup(literal(text))


def _where(ev: dict[str, Any]) -> str:
    """'train.log:12 (rank 3, WorkerDict pid=77, 10.0.0.1)' from an evidence dict."""
    who = []
    if ev.get("rank") is not None:
        who.append(f"rank {ev['rank']}")
    if ev.get("actor") or ev.get("pid"):
        who.append(" ".join(str(x) for x in (ev.get("actor"), ev.get("pid") and f"pid={ev['pid']}") if x))
    if ev.get("host"):
        who.append(ev["host"])
    return f"{literal(source_name(ev['file']))}:{ev['line']}" + (aside(_(", ").join(who)) if who else "")


def source_name(path: str) -> str:
    """A source's path as people read it: `errmap run`'s output without a --log file is named in words."""
    return _("the command's output") if path == COMMAND_OUTPUT else path


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
    """How many rows `draw` prints at `con`'s width (a line wider than that in the rows the terminal folds it to)."""
    probe = Console(file=io.StringIO(), width=con.width, highlight=False, soft_wrap=True, color_system=None)
    draw(probe)
    return sum(max(1, -(-cell_len(line) // con.width)) for line in probe.file.getvalue().split("\n")[:-1])


def counted(con: Console, draw: Callable[[Console], None]) -> int:
    """Print what `draw` prints; the rows it took."""
    draw(con)
    return rows(con, draw)


def fit(con: Console, d: dict[str, Any], n: int | None, room: int, led: int = 0) -> tuple[int, int]:
    """(steps, cause lines) of diagnosis `d` that fit `room` rows: SHOWN_STEPS steps and SHOWN_CAUSE lines of
    cause, else fewer steps down to FEWEST_STEPS with the `led` rows of what it led to still in the room;
    else, in the room without those, fewer steps down to one, a shorter cause, then no step. A step is
    shown whole or not at all; the `more:` line counts those left out."""
    most = min(SHOWN_STEPS, len(d["fix"]))
    shapes = list(dict.fromkeys([*((s, SHOWN_CAUSE) for s in range(most, 0, -1)),
                                 *((min(most, 1), c) for c in range(SHOWN_CAUSE, 0, -1)),
                                 *((0, c) for c in range(SHOWN_CAUSE, 0, -1))]))
    tries = [(shape, room - led) for shape in shapes if shape[0] >= min(FEWEST_STEPS, most)] + [(shape, room) for shape in shapes]
    sizes: dict[tuple[int, int], int] = {}
    for (steps, cause), space in tries:
        if (steps, cause) not in sizes:
            sizes[steps, cause] = rows(con, lambda c: print_diagnosis(c, d, n, room=0, steps=steps, cause=cause))
        if sizes[steps, cause] <= space:
            return steps, cause
    return shapes[-1]


def print_diagnosis(con: Console, d: dict[str, Any], n: int | None = None, brief: bool = False, verbose: bool = False,
                    room: int = SCREEN_ROWS, led: int = 0, steps: int = SHOWN_STEPS, cause: int = SHOWN_CAUSE) -> None:
    """One diagnosis: header, evidence, cause, fix, links; by default in `room` rows with the `led` rows
    after it (`fit`; a `room` of 0: `steps` steps and `cause` lines of cause), all of it with `verbose`."""
    if not (brief or verbose) and room > 0:
        steps, cause = fit(con, d, n, room, led)
    role = "" if d["role"] == "root" else f"[dim]{aside(_('consequence'))}[/]"
    if d["confidence"] == "likely":  # found by the words of its family, not by a known message
        role += f"[yellow]{aside(_('likely: {words}').format(words=' + '.join(d['hint'])))}[/]"
    code = f"[bold red]{d['errno']}[/] "  # live (no number), a wrapped header goes on under its title
    block(con, f"[bold]{n}.[/] " if n else code,
          f"{code if n else ''}[bold]{escape(d['title'])}[/]{role}  [dim]{d['slug']} · {_spread(d)}[/]")
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
    block(con, f"   [bold]{pad(_('Cause'), label)}[/]  ", escape(d["cause"]) if d["cause"] else  # a draft of your own KB
          f"[dim]{escape(_('not written yet: your entry leaves it empty'))}[/]", None if verbose else cause)
    shown = d["fix"] if verbose else d["fix"][:steps]
    numbers = d.get("fix_numbers") or range(1, len(d["fix"]) + 1)  # each step's place in the KB, as explain numbers it
    digits = len(str(max(numbers[:len(shown)], default=1)))
    for i, (n, step) in enumerate(zip(numbers, shown)):
        block(con, f"   [bold]{pad(_('Fix') if i == 0 else '', label)}[/]  {n:>{digits}}. ", escape(step), margin=3)
    if verbose:  # the steps for other releases than this run's
        for other in d.get("fix_other_versions", ()):
            only = ", ".join(f"{p} {spec}".strip() for p, spec in other["versions"].items())
            number = f"{other['number']}. " if "number" in other else ""
            block(con, f"   {pad('', label)}  [dim]{number}{aside(_('for {releases} only').format(releases=only)).strip()}[/] ",
                  f"[dim]{escape(other['text'])}[/]", margin=3)
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


def _print_status(con: Console, report: Report, ranked: list) -> None:
    """What the report says before its diagnoses: inputs it could not read, warnings, how the command ended."""
    for err in report.errors:  # the common reasons are in the catalogue (JSON keeps them in English)
        block(con, "[bold red]errmap:[/] ", f"{escape_line(err.path)}{_(': ')}{escape(_(err.reason))}")
    for s in report.sources:
        if s.warning:
            block(con, "[yellow]errmap:[/] ", f"{escape_line(s.path)}: {escape(s.warning)}")
    cmd = report.command()
    if cmd and cmd.get("interrupted") and not cmd.get("killed_by_errmap"):
        block(con, "", f"[bold yellow]{_('Interrupted (Ctrl-C)')}[/]"
              + escape(_(": the command ended with status {status}.").format(status=cmd["status"])))
    elif cmd and cmd["status"]:
        how = "" if "signal" not in cmd else (_(" (killed by {signal} after a second Ctrl-C)") if cmd.get("killed_by_errmap")
                                              else _(" (killed by {signal})")).format(signal=cmd["signal"])
        known = _("; no known cause in its output") if not ranked else ""
        block(con, "", f"[bold red]{_('The command failed')}[/]"
              + escape(_(" with status {status}{how}{known}.").format(status=cmd["status"], how=how, known=known)))
        if "likely" in cmd:
            errno, says = report.exits[cmd["signal"]]
            block(con, f"   {lead(_('Likely cause:'))}", f"{errno} {escape(says)}")
            block(con, f"   [dim]{lead(_('more:'))}[/]", f"[dim]errmap explain {errno}[/]")


@dataclass(frozen=True)
class Shape:
    """How much of a report its text shows: by default all of this; less of it where a screen needs (`shapes`)."""
    steps: int | None = None  # the first diagnosis's fix steps; None: as many as fit the first screen (`fit`)
    cause: int = SHOWN_CAUSE  # lines of the first diagnosis's cause
    later: bool = True  # later diagnoses as blocks (whole where a run opens, else brief); else one line each
    listed: int | None = None  # later diagnoses shown (None: all); one line counts the rest
    led: bool = True  # what a diagnosis led to, whole; else one row each
    residue: int | None = None  # unrecognized errors listed (None: SHOWN_RESIDUE beside diagnoses, else all)


def shapes(first: dict[str, Any] | None, later: int, residue: int, tops: bool) -> list[Shape]:
    """A report's shapes from the most it shows to the least, each cutting one thing more: the unrecognized
    errors to the first, later diagnoses to a line each, the first diagnosis's steps to FEWEST_STEPS, what
    it led to to a row each, its steps to one, later diagnoses to fewer (one line counts the rest), no
    unrecognized error, a shorter cause, no step."""
    most = min(SHOWN_STEPS, len(first["fix"])) if first else 0
    s = Shape(steps=most, listed=later, residue=min(SHOWN_RESIDUE, residue) if tops else residue)
    out = [s]
    while s.residue > 1:
        out.append(s := replace(s, residue=s.residue // 2))
    out.append(s := replace(s, later=False))
    for k in range(most - 1, min(FEWEST_STEPS, most) - 1, -1):
        out.append(s := replace(s, steps=k))
    out.append(s := replace(s, led=False))
    out.append(s := replace(s, steps=min(most, 1)))
    while s.listed:
        out.append(s := replace(s, listed=s.listed // 2))
    out.append(s := replace(s, residue=0))
    for c in range(SHOWN_CAUSE - 1, 0, -1):
        out.append(s := replace(s, cause=c))
    out.append(replace(s, steps=0))
    return list(dict.fromkeys(out))


_GIVEN_BACK = ("steps", "cause", "residue", "listed", "led", "later")  # the cuts of `shapes`, the last first


def print_report(con: Console, report: Report, verbose: bool = False, summary: dict[tuple, dict] | None = None,
                 screen: int | None = None) -> None:
    """The whole report; a `summary` of what watch and run printed live (the diagnoses by fingerprint) keeps each
    diagnosis they printed with the same advice to its header, and shows whole one whose advice the rest of the log changed.
    On a terminal of `screen` rows it fits `screen` - 1 of them, the last being the shell's prompt after it, so that
    its first diagnosis stays on the screen when it ends: the first shape (`shapes`) that fits, and a line saying so
    when it is not the first; `verbose` shows everything."""
    ranked = report.ranked()
    residue = report.triage.unrecognized()
    read = [s for s in report.sources if not s.error]
    lines = sum(s.lines for s in read)
    scanned = (ngettext("{n} file", "{n} files", len(read)).format(n=len(read)) + _(", ")
               + ngettext("{lines:,} line", "{lines:,} lines", lines).format(lines=lines))
    cmd = report.command()
    stopped = report.triage.interrupted()
    if not ranked and not residue:
        _print_status(con, report, ranked)
        if report.errors:
            n = len(report.errors)
            also = f"[dim]{aside(_('{scanned} read').format(scanned=scanned))}[/]" if read else ""
            block(con, f"[bold red]{lead(_('Nothing diagnosed:'))}[/]",
                  ngettext("{n} input could not be read", "{n} inputs could not be read", n).format(n=n) + also)
        elif stopped is not None and not cmd:
            _print_interrupted(con, stopped, f"[dim]{aside(scanned + _('; ') + _('no error before it'))}[/]")
        elif not (cmd and cmd["status"]):
            block(con, "", f"[green]{_('No error found')}[/][dim]{aside(scanned)}[/]")
        return
    found = _Found(report, ranked, residue, scanned, verbose, summary)
    if screen is None or verbose:
        return found.draw(con, Shape())
    tried = shapes(found.tops[0][1] if found.tops else None, len(found.tops) - 1, len(residue), bool(found.tops))

    def shortened(shape: Shape) -> bool:  # more than the first diagnosis's steps and cause, which its `more:` line counts
        return replace(shape, steps=tried[0].steps, cause=tried[0].cause) != tried[0]

    def fits(shape: Shape) -> bool:
        return found.rows(con, shape, shortened(shape)) < screen

    k = next((i for i, shape in enumerate(tried) if fits(shape)), len(tried) - 1)
    shape = tried[k]
    for field in _GIVEN_BACK:  # what a later cut left room for again
        for value in dict.fromkeys(getattr(s, field) for s in tried[:k]):
            if value == getattr(shape, field):
                break
            if fits(wider := replace(shape, **{field: value})):
                shape = wider
                break
    found.draw(con, shape, shortened(shape))


class _Found:
    """A report with diagnoses or unrecognized errors, in parts that start rows of their own: the head, the first
    diagnosis, the later ones, the unrecognized errors and what else was left out, a closing line. Each part's rows
    are counted once for each shape that changes it, so that trying shapes does not draw the report again."""

    def __init__(self, report: Report, ranked: list, residue: list[Residue], scanned: str, verbose: bool,
                 summary: dict[tuple, dict] | None):
        self.report, self.ranked, self.residue, self.scanned = report, ranked, residue, scanned
        self.verbose, self.summary = verbose, summary
        self.tops = [(inc, d) for inc, d in ranked if inc.cause is None]
        self.dicts = {id(inc): d for inc, d in ranked}
        self.runs = list(dict.fromkeys(inc.run for inc, _ in self.tops))
        self.known: dict[tuple, int] = {}  # rows of a part, by the part and what of the shape it reads

    def rows(self, con: Console, shape: Shape, shortened: bool) -> int:
        """The rows `draw` takes."""
        parts = {("head",): self.head, ("first", shape.steps, shape.cause, shape.led): lambda c: self.first(c, shape),
                 ("later", shape.later, shape.listed, shape.led): lambda c: self.later(c, shape),
                 ("rest", shape.residue): lambda c: self.rest(c, shape),
                 ("closing", shortened, self.briefs(shape) > 0): lambda c: self.closing(c, shape, shortened)}
        for key, draw in parts.items():
            if key not in self.known:
                self.known[key] = rows(con, draw)
        return sum(self.known[key] for key in parts)

    def draw(self, con: Console, shape: Shape, shortened: bool = False) -> None:
        """The report as much of it as `shape` says; `shortened`: a closing line says what shows the rest."""
        above = counted(con, self.head)
        self.first(con, shape, above)
        self.later(con, shape)
        self.rest(con, shape)
        self.closing(con, shape, shortened)

    def head(self, con: Console) -> None:
        """How the command ended and the heading, then a blank row."""
        report, tops = self.report, self.tops
        _print_status(con, report, self.ranked)
        stack = stack_name(fw, language()) + _("; ") if len(self.runs) < 2 and (fw := report.framework()) else ""
        stack += escape(g.describe()) + _("; ") if len(self.runs) < 2 and (g := report.gpu()) else ""
        if tops:
            heading = ngettext("{n} diagnosis", "{n} diagnoses", len(tops)).format(n=len(tops))
            block(con, "", f"[bold]{heading}[/][dim]{aside(stack + self.scanned + _('; ') + _('root cause first'))}[/]")
        else:
            heading = ngettext("No known cause for {n} error", "No known cause for {n} errors", len(self.residue)).format(n=len(self.residue))
            block(con, "", f"[bold]{heading}[/][dim]{aside(stack + self.scanned)}[/]")
        con.print()

    def shown(self, shape: Shape) -> tuple[list[tuple[int, bool]], int, dict[int, int]]:
        """The later diagnoses shown, (their number, whole or one line), those left out of the lines, and how many
        diagnoses each code has."""
        codes: dict[int, int] = {}
        out: list[tuple[int, bool]] = []
        unlisted = 0
        for n, (_inc, d) in enumerate(self.tops, 1):
            codes[d["errno"]] = codes.get(d["errno"], 0) + 1
            if n == 1 or (codes[d["errno"]] > SHOWN_PER_CODE and not self.verbose):
                continue
            if not shape.later and shape.listed is not None and sum(not whole for _, whole in out) >= shape.listed:
                unlisted += 1
            else:
                out.append((n, shape.later))
        return out, unlisted, codes

    def briefs(self, shape: Shape) -> int:
        """Diagnoses shown brief because an earlier one of their run was shown whole."""
        if self.summary is not None or self.verbose:
            return 0
        return sum(self.tops[n - 1][0].run == self.tops[n - 2][0].run for n, whole in self.shown(shape)[0] if whole)

    def first(self, con: Console, shape: Shape, above: int = 0) -> None:
        if self.tops:
            self.diagnosis(con, 1, shape, above)

    def later(self, con: Console, shape: Shape) -> None:
        shown, unlisted, codes = self.shown(shape)
        for n, whole in shown:
            if whole:
                self.diagnosis(con, n, shape)
            else:
                self.run(con, n)
                _inc, d = self.tops[n - 1]
                row(con, f"[bold]{n}.[/] [bold red]{d['errno']}[/] {escape(d['title'])}[dim] · {_spread(d)}[/]")
        if unlisted:
            block(con, "", f"[dim]{ngettext('… {n} more diagnosis', '… {n} more diagnoses', unlisted).format(n=unlisted)}[/]")
        if unlisted or not all(whole for _, whole in shown):
            con.print()
        for errno, k in codes.items():
            if k > SHOWN_PER_CODE and not self.verbose:
                more = _("… {n} more diagnoses of {errno} with other values (--verbose or --format json lists them)")
                block(con, "", f"[dim]{more.format(n=k - SHOWN_PER_CODE, errno=errno)}[/]")

    def run(self, con: Console, n: int) -> int:
        """The line naming the run that diagnosis `n` opens, where the report has several; the rows it took."""
        inc, d = self.tops[n - 1]
        if len(self.runs) < 2 or (n > 1 and inc.run == self.tops[n - 2][0].run):
            return 0
        files = [s.path for s in self.report.sources if s.run == inc.run]
        more_files = ngettext("and {n} more file", "and {n} more files", len(files) - 1).format(n=len(files) - 1)
        what = _(", ").join(x for x in (stack_name(d["framework"], language()) if d["framework"] else "", (d["gpu"] or {}).get("name", ""),
                                        files[0] if files else "", more_files if len(files) > 1 else "") if x)
        run = _("Run {k} of {n}").format(k=self.runs.index(inc.run) + 1, n=len(self.runs))
        return counted(con, lambda c: block(c, f"[bold]{run}[/] ", f"[dim]{aside(escape(what)).lstrip()}[/]"))

    def diagnosis(self, con: Console, n: int, shape: Shape, above: int = 0) -> None:
        """Diagnosis `n` whole (brief after the first of its run), what it led to, a blank row; the first one's steps
        and cause as `shape` says, or (its steps None) as many as fit the first screen below the `above` rows."""
        inc, d = self.tops[n - 1]
        opens = n == 1 or inc.run != self.tops[n - 2][0].run
        above += self.run(con, n)
        if self.summary is not None:  # brief where the live diagnosis said the same
            brief = (said := self.summary.get(inc.fingerprint)) is not None and not changed(said, d)
        else:
            brief = not (opens or self.verbose)
        if shape.steps is None:  # the first screen from the top
            led = rows(con, lambda c: _print_consequences(c, inc, self.dicts, shape.led))
            print_diagnosis(con, d, n, brief=brief, verbose=self.verbose, room=SCREEN_ROWS - above, led=led)
        else:
            print_diagnosis(con, d, n, brief=brief, room=0, steps=shape.steps if n == 1 else SHOWN_STEPS,
                            cause=shape.cause if n == 1 else SHOWN_CAUSE)
        _print_consequences(con, inc, self.dicts, shape.led)
        con.print()

    def rest(self, con: Console, shape: Shape) -> None:
        """The errors not in the knowledge base, a run its user stopped, what the caps on kept incidents left out."""
        residue, tops, verbose = self.residue, self.tops, self.verbose
        if residue:
            if verbose or (shape.residue is None and not tops):
                listed = residue
            else:
                listed = residue[:SHOWN_RESIDUE if shape.residue is None else shape.residue]
            label = _("Errors not in the knowledge base") if not tops else _("Also seen, not in the knowledge base")
            block(con, "", f"[bold]{label}[/][dim]{aside(str(len(residue)))}[/]")
            for r in listed:
                count = f"[dim]{aside(_('{n}x').format(n=r.count))}[/]" if r.count > 1 else ""
                text = escape(r.first.text.strip()[:SHOWN_TEXT])
                if verbose or not tops:
                    block(con, "   ", f"[cyan]{escape(_where(evidence_json(r.first)))}[/]{count}  {text}")
                else:  # one row beside diagnoses: the file and line, not the process, before the message (-v names it)
                    row(con, f"   [cyan]{escape(r.first.path)}:{r.first.lineno}[/]{count}  {text}")
            if listed and len(listed) < len(residue):
                block(con, "   ", f"[dim]{_('… {n} more (--verbose lists them)').format(n=len(residue) - len(listed))}[/]")
            if listed and os.path.isfile(first := residue[0].first.path):  # a log on disk: how to make the first one known
                block(con, f"   [dim]{lead(_('teach errmap:'))}[/]", f"[dim]errmap kb new {escape(first)}:{residue[0].first.lineno}[/]")
        if (stopped := self.report.triage.interrupted()) is not None and not self.report.command():
            _print_interrupted(con, stopped)
        _print_omitted(con, self.report.triage)

    def closing(self, con: Console, shape: Shape, shortened: bool) -> None:
        """One line saying what shows what the report left out."""
        if shortened:
            block(con, "", f"[dim]{_('Shortened to fit the screen; --verbose shows all of it, `errmap explain N` one.')}[/]")
        elif self.briefs(shape):
            block(con, "", f"[dim]{_('Diagnoses after the first are brief; --verbose shows each in full, `errmap explain N` one.')}[/]")


def _print_interrupted(con: Console, stopped: Residue, after: str = "") -> None:
    """A log's run that its user stopped (KeyboardInterrupt): said as such, never as an unknown error."""
    where = escape(_where(evidence_json(stopped.first)))
    block(con, "", f"[bold yellow]{_('Interrupted (Ctrl-C)')}[/]"
          + escape(_(": the run was stopped by its user (KeyboardInterrupt at {where})").format(where=where)) + after)


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


def _print_consequences(con: Console, inc: Incident, dicts: dict[int, dict[str, Any]], whole: bool = True, depth: int = 1) -> None:
    """What `inc` led to, a branch each; not `whole`: one row each, without where it was first seen."""
    for c in inc.consequences:
        cd = dicts[id(c)]
        lead = f"   {'   ' * (depth - 1)}[dim]└─ {_('led to')}[/] "
        if whole:
            block(con, lead, f"{cd['errno']} {escape(cd['title'])}"
                  f"[dim]{aside(_spread(cd) + _('; ') + _('first at {where}').format(where=escape(_where(cd['evidence'][0]))))}[/]")
        else:
            row(con, f"{lead}{cd['errno']} {escape(cd['title'])}[dim]{aside(_spread(cd))}[/]")
        _print_consequences(con, c, dicts, whole, depth + 1)
