"""The errmap command line: scan, watch, run, explain, list, doctor, kb check and docs."""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console

from errmap.report import i18n, inert, layout
from errmap.report.dumps import dumps, jsonl
from errmap.report.github import github
from errmap.report.save import save
from errmap.report.sarif import sarif
from errmap.kb import load as kbmod
from errmap.kb import model as kbmodel
from errmap.scan import prefilter
from errmap.probes import verify
from errmap.report.i18n import _
from errmap.probes.verify import probe_options
from errmap.scan.matcher import Matcher
from errmap.report.contract import Report, changed, diagnose
from errmap.report.text import escape, escape_line, print_diagnosis, print_report, source_name
from errmap.scan.parallel import scan, scan_source
from errmap.scan.source import COMMAND_OUTPUT, InputError, Source, expand
from errmap.scan.triage import Incident, Residue, Triage

EXIT_INPUT = 2
i18n.speak_for_click()


def _console(stderr: bool = False) -> Console:
    return layout.console(stderr)


def _load_kb(extra: tuple[str, ...], fmt: str = "text") -> kbmodel.KB:
    """The KB; in Chinese for text output with --lang zh (machine formats keep the English text)."""
    kb = kbmod.load([Path(p) for p in extra])
    if kb.warnings:
        err = _console(stderr=True)
        for w in kb.warnings:
            err.print(f"[yellow]errmap: {_('knowledge base:')}[/] {escape_line(w)}")
    return kb.localized(i18n.language()) if fmt == "text" else kb


kb_option = click.option(
    "--kb", "kb_dirs", multiple=True, type=click.Path(), metavar="DIR",
    help="Extra folder of your own KB entries (errno 9000-9999); also ERRMAP_KB_PATH.",
)

report_option = click.option(
    "--report", "report_path", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
    help="Also write the report to FILE, in --format (json when --format is text); the terminal keeps the text.",
)


verbose_option = click.option(
    "-v", "--verbose", is_flag=True,
    help="Each diagnosis in full: the whole cause, every fix step and link (by default one screen each).")

_FORMAT_HELP = {
    "text": "text for people",
    "json": "json for programs (a stable contract)",
    "jsonl": "jsonl one diagnosis a line as it happens",
    "sarif": "sarif for code scanning",
    "github": "github for Actions annotations",
}


def format_option(*choices: str):
    names = ["text", "json", *choices]
    return click.option(
        "--format", "fmt", type=click.Choice(names), default="text", show_default=True,
        help="; ".join(_FORMAT_HELP[n] for n in names) + ".",
    )


@click.group(cls=i18n.Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="errmap", message=f"%(prog)s %(version)s (stage one: {prefilter.engine()})")
def main() -> None:
    """Find the root cause of a failed training run in its logs."""


@main.command("scan")
@click.argument("paths", nargs=-1)
@format_option("jsonl", "sarif", "github")
@click.option("-v", "--verbose", is_flag=True, help="Every diagnosis in full and every unrecognized error line.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes for large inputs (default: ERRMAP_JOBS, else every core).")
@click.option("--one-run", is_flag=True, help="All files are logs of one run (by default files given one by one are separate runs).")
@report_option
@kb_option
@probe_options
@click.option("--ray", "ray_address", is_flag=False, flag_value="auto", default=None, metavar="[ADDRESS]",
              help="Scan every node of a Ray cluster where its logs lie (default: the running one, or RAY_ADDRESS).")
@click.option("--node-path", "node_paths", multiple=True, metavar="GLOB",
              help="With --ray: more files to scan on each node, e.g. '/data/ckpt/*/train.log'.")
@click.option("--since", default=None, metavar="TIME",
              help="With --ray: only lines after TIME ('2026-12-03 10:00', or an age: 2h, 30m, 1d).")
@click.option("--node-timeout", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="With --ray: a node that has not answered by then is reported as such.")
@click.option("--connect-timeout", type=click.FloatRange(min=0.5), default=15.0, show_default=True, metavar="SECONDS",
              help="With --ray: how long the address may take to answer as a Ray GCS.")
def scan_cmd(paths: tuple[str, ...], fmt: str, verbose: bool, jobs: int | None, one_run: bool, report_path: str | None,
             kb_dirs: tuple[str, ...],
             probe: bool = False, data_file: str | None = None, model_dir: str | None = None,
             ray_address: str | None = None, node_paths: tuple[str, ...] = (), since: str | None = None,
             node_timeout: float = 60.0, connect_timeout: float = 15.0) -> None:
    """Diagnose log files, directories of logs, compressed files (gz, bz2, xz, zst) or - for stdin; or, with
    --ray, a whole Ray cluster.

    Exit status: 0 no error found, 1 errors diagnosed, 2 usage or input error.
    """
    kb = _load_kb(kb_dirs, "text" if report_path else fmt)
    if ray_address is not None:
        _scan_ray(kb, ray_address, paths, node_paths, since, node_timeout, connect_timeout, fmt, verbose, report_path)
    if not paths:
        raise click.UsageError(_("give log files or directories to scan, or --ray for a Ray cluster"))
    try:
        found = expand(list(paths))
        for s in found.sources if one_run else ():
            s.run = ""
        sniffer = verify.sniff(found.sources) if probe else None
        report = scan(Matcher(kb), found.sources, found.errors, jobs)
    except KeyboardInterrupt:
        _console(stderr=True).print(f"[bold red]errmap:[/] {_('interrupted; nothing diagnosed')}")
        sys.exit(130)
    if sniffer is not None:
        verify.attach(report, verify.prober_for(sniffer.settings, data_file, model_dir))
    _save_report(report, fmt, report_path, kb=kb)
    _emit(report, "text" if report_path else fmt, verbose, kb)
    sys.exit(report.exit_code())


def _scan_ray(kb: kbmodel.KB, address: str, paths: tuple[str, ...], node_paths: tuple[str, ...], since: str | None,
              node_timeout: float, connect_timeout: float, fmt: str, verbose: bool, report_path: str | None) -> None:
    from errmap.commands import cluster

    if paths:
        raise click.UsageError("--ray scans the nodes' own logs; name more files on every node with --node-path GLOB")
    try:
        cutoff = cluster.parse_since(since) if since else None
        done = cluster.scan_cluster(kb, None if address == "auto" else address, list(node_paths), cutoff, node_timeout,
                                    connect_timeout)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except cluster.ClusterError as exc:
        _console(stderr=True).print(f"[bold red]errmap:[/] {escape(str(exc))}")
        sys.exit(EXIT_INPUT)
    for note in done.notes:
        _console(stderr=True).print(f"[yellow]errmap:[/] {escape(note)}")
    more = {"nodes": [n.to_json() for n in done.nodes]}
    _save_report(done.report, fmt, report_path, more, kb)
    fmt = "text" if report_path else fmt
    nodes = cluster.node_lines(done.nodes)
    _emit(done.report, fmt, verbose, kb, more, below=len(nodes))
    if fmt == "text":
        for line in nodes:
            _console().print(f"[dim]{escape(line)}[/]")
    sys.exit(done.report.exit_code())


def _emit(report: Report, fmt: str, verbose: bool, kb: kbmodel.KB | None = None, more: dict | None = None,
          below: int = 0) -> None:
    """The report on stdout in `fmt`; text on a terminal fits its screen with the `below` lines printed after it."""
    if fmt == "text":
        screen = layout.height(sys.stdout)
        print_report(_console(), report, verbose, screen=screen and max(screen - below, 1))
        return
    _say_errors(report)
    # errmap's own annotations are the only workflow commands it prints (report/inert.py)
    click.echo(_machine(report, fmt, more, kb), nl=False, file=inert.unguarded(sys.stdout) if fmt == "github" else None)


def _say_errors(report: Report) -> None:
    """Input errors on stderr, beside a machine format (text says them in its report)."""
    for err in report.errors:
        _console(stderr=True).print(f"[bold red]errmap:[/] {escape_line(err.path)}: {escape(err.reason)}")


def _machine(report: Report, fmt: str, more: dict | None = None, kb: kbmodel.KB | None = None) -> str:
    """The report in a machine format (json for text), as the text of a file; `more` adds to its JSON."""
    doc = report.to_json() | (more or {})
    if kb is not None and i18n.asked() == "zh":  # the Chinese text in a field of its own; the English keys stay
        from errmap.kb.translations import for_json

        for d in doc["diagnoses"]:
            zh = for_json(kb.entries[d["errno"]], kb.zh.get(d["errno"]), d["captures"], d.get("framework"), diagnosis=True,
                          gpu=d.get("gpu"))
            if zh is not None:
                d["zh"] = zh
    if fmt in ("json", "text"):
        return dumps(doc) + "\n"
    if fmt == "sarif":
        return dumps(sarif(doc["diagnoses"], doc["unrecognized"], doc.get("nodes"))) + "\n"
    lines = [jsonl(d) for d in doc["diagnoses"]] if fmt == "jsonl" else github(doc["diagnoses"], doc["unrecognized"])
    return "".join(line + "\n" for line in lines)


def _save_report(report: Report, fmt: str, path: str | None, more: dict | None = None, kb: kbmodel.KB | None = None) -> None:
    if path is None:
        return
    try:
        save(path, _machine(report, fmt, more, kb))
    except OSError as exc:
        _console(stderr=True).print(f"[bold red]errmap:[/] {escape_line(path)}: {escape(exc.strerror or str(exc))}")
        sys.exit(EXIT_INPUT)


def _live(out: Console, fmt: str, report: Report, extra: Callable[[Incident], dict] | None = None,
          verbose: bool = False, printed: dict[tuple, dict] | None = None) -> Callable[[Incident | Residue], None]:
    """What watch and run print the moment a new incident or unrecognized error appears: the diagnosis scan gives
    for the lines read so far (the stack, GPU and releases they have named). A consequence whose cause is already
    in the log is brief, as scan folds it under that cause. `printed` keeps each diagnosis as it was shown."""

    def on_new(item: Incident | Residue) -> None:
        if fmt == "json" or isinstance(item, Residue) and (item.interrupt or report.triage.ended(item) is not None):
            return  # one JSON document at the end; a user's Ctrl-C, a known failure's abort: said in the summary
        if isinstance(item, Residue):
            if fmt == "jsonl":
                out.file.write(jsonl({"unrecognized": {"type": item.type, "message": item.message, "file": item.first.path, "line": item.first.lineno}}) + "\n")
            else:
                layout.block(out, f"[yellow]errmap: {_('unrecognized error')}[/] ",
                             f"[cyan]{escape_line(source_name(item.first.path))}:{item.first.lineno}[/]  {escape(item.first.text.strip()[:300])}")
        elif report.triage.shown(item):
            probed = extra(item) if extra is not None else {}
            d = diagnose(item, report.framework(item.files), report.gpu(item.run), report.versions(item.run))
            d.update(probed)
            if printed is not None:
                printed[item.fingerprint] = d
            if fmt == "jsonl":
                out.file.write(jsonl(d) + "\n")
            else:
                folded = item.entry.role == "consequence" and report.triage.cause_of(item) is not None
                print_diagnosis(out, d, brief=folded, verbose=verbose)
        out.file.flush()

    return on_new


@main.command()
@click.option("--follow", "follow_path", type=click.Path(), metavar="FILE",
              help="Follow FILE like tail -F (waits for it, survives rotation and truncation).")
@click.option("--passthrough", is_flag=True, help="Print every line read to stdout as it comes; diagnoses go to stderr.")
@format_option("jsonl")
@verbose_option
@report_option
@kb_option
@probe_options
def watch(follow_path: str | None, passthrough: bool, fmt: str, verbose: bool, report_path: str | None,
          kb_dirs: tuple[str, ...], probe: bool = False, data_file: str | None = None, model_dir: str | None = None) -> None:
    """Diagnose a live log from stdin (or --follow FILE) as each line arrives.

    python train.py 2>&1 | errmap watch --passthrough

    (errmap run -- CMD does the same for a command it starts, and keeps its exit status.)
    """
    kb = _load_kb(kb_dirs, fmt)
    matcher = Matcher(kb)
    triage = Triage()
    source = Source(follow_path or "-")
    file_fmt, fmt = fmt, "text" if report_path else fmt
    report = Report([source], triage)
    sniffer = verify.sniff([source]) if probe and not follow_path else None
    settings = (lambda: sniffer.settings) if sniffer is not None else (lambda: verify.sniff_file(follow_path))
    probed = _prober(report, settings, data_file, model_dir) if probe else None
    printed: dict[tuple, dict] = {}
    on_new = _live(_console(stderr=passthrough), fmt, report, probed, verbose, printed)
    status = 0  # 130 or 143 once Ctrl-C or SIGTERM ended the reading
    signal.signal(signal.SIGTERM, _stop)  # a summary on SIGTERM too, as on Ctrl-C
    if not follow_path and sys.stdin is not None and sys.stdin.isatty():
        layout.block(_console(stderr=True), "", _(
            "{watch} reads a log on stdin: pipe one in ({example}), or use {follow} or {run}. Reading this terminal until Ctrl-D.")
            .format(watch="[yellow]errmap watch[/]", example="`python train.py 2>&1 | errmap watch`",
                    follow="`--follow FILE`", run="`errmap run -- CMD`"))
    echo = (lambda chunk: (sys.stdout.buffer.write(chunk), sys.stdout.buffer.flush())) if passthrough else None
    try:
        if follow_path:
            from errmap.scan.follow import follow_into

            notices = _console(stderr=True)
            follow_into(matcher, follow_path, triage, on_new,
                        notice=lambda msg: notices.print(f"[yellow]errmap:[/] {escape(msg)}"), counted=source, echo=echo)
        else:
            scan_source(matcher, source, triage, on_new, echo)
            if source.error:
                report.errors.append(InputError(source.path, source.error))
    except InputError as exc:  # the followed path: on its source, so that the JSON says it
        source.error = exc.reason
        report.errors.append(exc)
    except (KeyboardInterrupt, _Stopped) as exc:
        status = 143 if isinstance(exc, _Stopped) else 130
    late: list[int] = []  # a SIGTERM from here on is noted, not raised: the summary is written whole
    signal.signal(signal.SIGTERM, lambda signum, _frame: late.append(signum))
    _save_report(report, file_fmt, report_path)
    _summary(report, fmt, probed, to_stderr=passthrough, printed=printed)
    sys.exit(143 if late else status or report.exit_code())


class _Stopped(Exception):
    """SIGTERM, raised where watch is reading so that it ends like Ctrl-C, with its summary."""


def _stop(_signum: int, _frame: object) -> None:
    raise _Stopped


def _prober(report: Report, settings: Callable[[], dict], data_file: str | None, model_dir: str | None) -> Callable[[Incident], dict]:
    """Verdict and facts for an incident, probed once and kept in the report (watch and run)."""
    prober = None

    def probed(inc: Incident) -> dict:
        nonlocal prober
        if inc.fingerprint not in report.extra:
            if prober is None:
                prober = verify.prober_for(settings(), data_file, model_dir)
            if report.probed_gpu is None and verify.reads_gpu(inc.entry):
                report.probed_gpu = verify.probed_gpu(prober)
            if not report.probed_versions and verify.versioned(inc.entry):
                report.probed_versions = verify.probed_versions(prober)
            report.extra[inc.fingerprint] = prober.verify(inc.entry, inc.captures).to_json()
        return report.extra[inc.fingerprint]

    return probed


def _summary(report: Report, fmt: str, probed: Callable[[Incident], dict] | None = None, to_stderr: bool = False,
             printed: dict[tuple, dict] | None = None) -> None:
    for inc in report.triage.incidents.values() if probed else ():
        probed(inc)
    if fmt != "text":
        _say_errors(report)
    if fmt == "json":
        click.echo(dumps(report.to_json()), err=to_stderr)
        return
    if fmt == "jsonl":  # every diagnosis was already written as it happened; an input error ends the stream
        ranked = report.ranked()
        for inc, d in ranked:  # again, marked, where the rest of the log changed what it says
            if (said := (printed or {}).get(inc.fingerprint)) is None or changed(said, d):
                click.echo(jsonl(d | ({"updated": True} if said else {})), err=to_stderr)
        kept = {inc.fingerprint for inc, _d in ranked}
        for fingerprint, said in (printed or {}).items():  # a likely match that an exact one of its code made moot
            if fingerprint not in kept:
                click.echo(jsonl(said | {"withdrawn": True}), err=to_stderr)
        for err in report.errors:
            click.echo(jsonl({"error": {"path": err.path, "reason": err.reason}}), err=to_stderr)
        return
    con = _console(stderr=to_stderr)
    con.print(f"\n[bold]{_('errmap summary')}[/]")
    screen = layout.height(sys.stderr if to_stderr else sys.stdout)  # the summary fits the screen below its heading
    print_report(con, report, summary=printed or {}, screen=screen and max(screen - 2, 1))


@main.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--log", "log_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write the command's combined output to FILE (line numbers refer to it).")
@format_option("jsonl")
@verbose_option
@report_option
@kb_option
@probe_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(command: tuple[str, ...], log_path: str | None, fmt: str, verbose: bool, report_path: str | None,
            kb_dirs: tuple[str, ...], probe: bool = False, data_file: str | None = None, model_dir: str | None = None) -> None:
    """Run a training command, diagnose its output live, exit with its status.

    errmap run --log train.log -- bash train_gsm8k.sh

    The command's stdout and stderr pass through unchanged; diagnoses go to stderr.
    """
    from errmap.commands.runner import run_command

    kb = _load_kb(kb_dirs, fmt)
    triage = Triage()
    source = Source(log_path or COMMAND_OUTPUT)
    report = Report([source], triage, exits=kb.exit_causes())
    file_fmt, fmt = fmt, "text" if report_path else fmt

    settings = lambda: verify.sniff_file(log_path) if log_path else {}  # noqa: E731
    probed = _prober(report, settings, data_file, model_dir) if probe else None
    printed: dict[tuple, dict] = {}
    on_new = _live(_console(stderr=True), fmt, report, probed, verbose, printed)
    try:
        log = open(log_path, "wb") if log_path else None
    except OSError as exc:
        _console(stderr=True).print(f"[bold red]errmap:[/] {escape_line(log_path)}: {escape(exc.strerror or str(exc))}")
        sys.exit(EXIT_INPUT)
    try:
        outcome = run_command(list(command), Matcher(kb), triage, source, on_new, log,
                              notice=lambda msg: _console(stderr=True).print(f"[yellow]errmap:[/] {escape(msg)}"))
        report.status, report.forced, report.interrupted = outcome.status, outcome.forced, outcome.interrupted
    except OSError as exc:  # the command could not be started
        _console(stderr=True).print(f"[bold red]errmap:[/] {escape_line(command[0])}: {escape(exc.strerror or str(exc))}")
        sys.exit(127)
    finally:
        if log is not None:
            log.close()
    _save_report(report, file_fmt, report_path)
    _summary(report, fmt, probed, to_stderr=True, printed=printed)
    sys.exit(outcome.status)


@main.command()
@click.argument("query")
@format_option()
@kb_option
def explain(query: str, fmt: str, kb_dirs: tuple[str, ...]) -> None:
    """Explain an error code (1012), a slug (triton-shared-memory), or a pasted message or log line.

    errmap explain 'CUDA error: device-side assert triggered'
    """
    from errmap.commands.explain import lookup, print_entry

    kb = _load_kb(kb_dirs, fmt)
    matcher = Matcher(kb)
    found = lookup(query, kb, matcher)
    err = _console(stderr=True)
    others = ", ".join(f"{e.errno} {e.slug}" for e in found.others)
    if found.entry is None:
        hint = _("did you mean {others}?").format(others=others) if found.others else _("`errmap list` shows every code")
        what = (_("no code {code}").format(code=query.strip()) if query.strip().isdigit()
                else _("no code, slug or known message in {query}").format(query=repr(query)))
        err.print(f"[bold red]errmap:[/] {escape(what + _('; ') + hint)}")
        sys.exit(EXIT_INPUT)
    e = found.entry
    if found.how == "message":
        also = _("; it also matches {others}").format(others=others) if others else ""
        err.print(f"[dim]errmap: {escape(_('the text matches {code}').format(code=f'{e.errno} {e.slug}') + also)}[/]")
    elif found.how == "start":
        err.print(f"[dim]errmap: {escape(_('the text is the start of a message of {code}').format(code=f'{e.errno} {e.slug}'))}[/]")
    elif found.how == "words":
        also = _(" (also close: {others})").format(others=others) if others else ""
        err.print(f"[dim]errmap: {escape(_('no message matched; the closest by its words is {code}').format(code=f'{e.errno} {e.slug}') + also)}[/]")
    if fmt == "json":
        doc = e.to_dict()
        if i18n.asked() == "zh" and e.errno in kb.zh:
            from errmap.kb.translations import for_json

            doc["zh"] = for_json(e, kb.zh[e.errno])
        click.echo(dumps(doc))
    else:
        print_entry(_console(), e, kb, matcher)


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--data", "data_files", multiple=True, type=click.Path(), metavar="FILE",
              help="A data file the run will read, parquet or JSON (repeatable; data.train_files/val_files after -- count too).")
@click.option("--model", "model_dir", type=click.Path(), metavar="DIR",
              help="The model folder (else actor_rollout_ref.model.path after --).")
@click.option("--stack", type=click.Choice(["verl", "trl", "openrlhf", "llamafactory"]), default=None,
              help="The trainer whose data rules --data is checked by (else the one verl's overrides or the installed "
                   "packages name).")
@format_option()
@kb_option
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINING OVERRIDES...]")
def doctor(data_files: tuple[str, ...], model_dir: str | None, stack: str | None, fmt: str, kb_dirs: tuple[str, ...],
           overrides: tuple[str, ...]) -> None:
    """Check this machine, data and model before a run; warn about the codes it will hit.

    \b
    errmap doctor --data train.parquet -- \\
        trainer.n_gpus_per_node=8 data.max_prompt_length=4096

    Exit status: 0 nothing predicted, 1 warnings, 2 usage error.
    """
    from errmap.commands.doctor import diagnose_setup, print_doctor

    kb = _load_kb(kb_dirs, "json")  # the KB's predictions (yours too: --kb), in English like the rest of doctor
    doc = diagnose_setup(list(data_files), model_dir, list(overrides), kb, stack)
    if fmt == "json":
        click.echo(dumps(doc.to_json(kb, kb.localized("zh") if i18n.asked() == "zh" else None)))
    else:
        print_doctor(_console(), doc, kb.localized(i18n.language()) if kb else None)
    sys.exit(1 if doc.warnings else 0)


@main.command("list")
@format_option()
@kb_option
def list_cmd(fmt: str, kb_dirs: tuple[str, ...]) -> None:
    """List every error code with its title (your own entries too: --kb, ERRMAP_KB_PATH)."""
    kb = _load_kb(kb_dirs, fmt)
    if fmt == "json":
        click.echo(dumps([{"errno": e.errno, "slug": e.slug, "title": e.title, "role": e.role, "group": e.group} for e in kb]))
        return
    con = _console()
    width = max(len(e.slug) for e in kb)
    group = None
    for e in kb:
        if e.group != group:
            if group is not None:
                con.print()
            group = e.group
            layout.block(con, "", f"[bold]{escape(group)}[/]")
        role = "" if e.role == "root" else f"  [dim]({_('consequence')})[/]"
        layout.block(con, f"  {e.errno}  {e.slug:<{width}}  ", f"{escape(e.title)}{role}")


@main.group("kb")
def kb_group() -> None:
    """Knowledge-base maintenance."""


@kb_group.command("check")
@kb_option
def kb_check(kb_dirs: tuple[str, ...]) -> None:
    """Validate every KB entry; exit 1 with a list of problems."""
    from errmap.kb.check import check

    problems = check([Path(p) for p in kb_dirs])
    con = _console()
    if problems:
        con.print(f"[bold red]{i18n.ngettext('{n} problem', '{n} problems', len(problems)).format(n=len(problems))}[/] {_('in the knowledge base:')}")
        for p in problems:
            con.print(f"  {escape_line(p)}")
        sys.exit(1)
    con.print(f"[green]{_('knowledge base OK')}[/]: {_('{n} entries').format(n=len(kbmod.load([Path(p) for p in kb_dirs])))}")


@kb_group.command("new")
@click.argument("where", required=False, metavar="[FILE:LINE]")
@click.option("--line", "pasted", metavar="TEXT", help="The failure line itself (else FILE:LINE, or the line on stdin).")
@click.option("--out", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Folder to write the entry to (default: the first --kb DIR, else ERRMAP_KB_PATH's first).")
@kb_option
def kb_new(where: str | None, pasted: str | None, out: str | None, kb_dirs: tuple[str, ...]) -> None:
    """Draft an entry of your own KB from a failure line errmap does not know.

    errmap kb new --kb ~/my-kb train.log:812

    It takes the next free code (9000-9999), an anchor made from the message (numbers, paths, addresses and ids
    generalised; scan must find the line with it and no line of the healthy logs), the log around the line as its
    fixture, and leaves the cause and fix for you to write; then runs kb check.
    """
    from errmap.commands.draft import DraftError, draft, read_source
    from errmap.commands.sections import fixtures_dir
    from errmap.kb.check import check
    from errmap.report.text import lead

    env = [p for p in os.environ.get("ERRMAP_KB_PATH", "").split(os.pathsep) if p]
    target = out or next(iter(kb_dirs), None) or next(iter(env), None)
    err = _console(stderr=True)
    if target is None:
        err.print(f"[bold red]errmap:[/] {escape(_('give --out DIR or --kb DIR (or set ERRMAP_KB_PATH): where your entries live'))}")
        sys.exit(EXIT_INPUT)
    stdin = sys.stdin.read() if where is None and pasted is None and not sys.stdin.isatty() else None
    try:
        lines, n, origin = read_source(where, pasted, stdin)
        clean = (fixtures_dir() / "clean") if fixtures_dir() else None
        d, entry, log = draft(lines, n, origin, [Path(p) for p in kb_dirs], Path(target), clean)
    except DraftError as exc:
        err.print(f"[bold red]errmap:[/] {escape(str(exc))}")
        sys.exit(EXIT_INPUT)
    con = _console()
    layout.block(con, f"[bold]{_('Drafted')}[/] ", f"[bold red]{d.errno}[/] {escape(d.slug)}  [dim]{escape(str(entry))}[/]")
    layout.block(con, f"   {lead(_('anchor:'))}", escape(d.regex))
    layout.block(con, f"   {lead(_('literal:'))}", escape(d.literal))
    if d.captures:
        layout.block(con, f"   {lead(_('captures:'))}", escape(", ".join(f"{k}={v}" for k, v in d.captures.items())))
    if d.framework:
        layout.block(con, f"   {lead(_('stack:'))}", escape(d.framework))
    layout.block(con, f"   {lead(_('fixture:'))}", escape(str(log)))
    problems = check([Path(p) for p in dict.fromkeys([*kb_dirs, target])])
    if problems:
        layout.block(con, f"[bold red]{lead(_('kb check:'))}[/]", escape(i18n.ngettext("{n} problem", "{n} problems", len(problems)).format(n=len(problems))))
        for p in problems:
            layout.block(con, "   ", escape(p))
    else:
        layout.block(con, f"[green]{lead(_('kb check:'))}[/]", escape(_("knowledge base OK")))
    layout.block(con, f"[dim]{lead(_('next:'))}[/]", escape(_("write its cause and fix in {entry}, then: errmap scan --kb {dir} {log}")
                                                            .format(entry=entry, dir=target, log=log)))


@main.group("docs")
def docs_group() -> None:
    """The docs site: one page per code, generated from the knowledge base."""


@docs_group.command("build")
@click.option("--out", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Folder of the built site (default: site/ of the checkout).")
@kb_option
def docs_build(out: str | None, kb_dirs: tuple[str, ...]) -> None:
    """Build the site, strictly: a broken link or a KB problem fails it (needs the docs extra).

    DIR must be new, empty or an earlier errmap site: errmap never deletes files it did not write.
    """
    from errmap.commands.docs import SiteRefused, build

    try:
        sys.exit(build(Path(out) if out else None, kb_dirs=kb_dirs))
    except (FileNotFoundError, SiteRefused) as exc:
        _console(stderr=True).print(f"[bold red]errmap:[/] {escape(str(exc))}")
        sys.exit(EXIT_INPUT)


@docs_group.command("serve")
@click.option("--dir", "site", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="The built site (default: site/ of the checkout).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port on 127.0.0.1; 0 picks a free one.")
def docs_serve(site: str | None, port: int) -> None:
    """Serve the built site on 127.0.0.1 (its search needs HTTP)."""
    from errmap.commands.docs import checkout, serve

    folder = Path(site) if site else checkout() / "site"
    if not (folder / "index.html").is_file():
        _console(stderr=True).print(f"[bold red]errmap:[/] no built site in {escape(str(folder))}; run `errmap docs build` first")
        sys.exit(EXIT_INPUT)
    try:
        serve(folder, port)
    except OSError as exc:  # the port is taken, or needs privileges
        _console(stderr=True).print(f"[bold red]errmap:[/] cannot serve on 127.0.0.1:{port}: {escape(exc.strerror or str(exc))}"
                                    + ("; try another --port, or 0 for a free one" if port else ""))
        sys.exit(EXIT_INPUT)

def run() -> None:
    """Entry point with the process-level behaviour a pipe tool needs."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL) if hasattr(signal, "SIGPIPE") else None
    inert.install()  # no line errmap prints is a CI runner's command but its own annotations
    try:
        try:
            main()
        finally:
            sys.stdout.flush()
    except OSError as exc:  # stdout on a full disk or /dev/full: say so once, then stop writing there
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"errmap: cannot write the report: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(EXIT_INPUT)


if __name__ == "__main__":
    run()
