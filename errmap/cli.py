"""The errmap command line: scan, watch, explain, list and kb check."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from errmap import kb as kbmod
from errmap.matcher import Matcher
from errmap.report import Report, print_diagnosis, print_report
from errmap.scan import scan, scan_source
from errmap.source import Source, expand
from errmap.triage import Incident, Residue, Triage

EXIT_INPUT = 2


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _load_kb(extra: tuple[str, ...]) -> kbmod.KB:
    try:
        kb = kbmod.load([Path(p) for p in extra])
    except kbmod.KBError as exc:
        err = _console(stderr=True)
        err.print("[bold red]errmap:[/] the knowledge base has problems:")
        for p in exc.problems:
            err.print(f"  {escape(p)}")
        sys.exit(EXIT_INPUT)
    for w in kb.warnings:
        _console(stderr=True).print(f"[yellow]errmap:[/] {escape(w)} (skipped)")
    return kb


kb_option = click.option(
    "--kb", "kb_dirs", multiple=True, type=click.Path(), metavar="DIR",
    help="Extra folder of your own KB entries (errno 9000-9999); also ERRMAP_KB_PATH.",
)
format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="text for people, json for programs (a stable contract).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="errmap")
def main() -> None:
    """Find the root cause of a failed training run in its logs."""


@main.command("scan")
@click.argument("paths", nargs=-1, required=True)
@format_option
@click.option("-v", "--verbose", is_flag=True, help="Every diagnosis in full and every unrecognized error line.")
@kb_option
def scan_cmd(paths: tuple[str, ...], fmt: str, verbose: bool, kb_dirs: tuple[str, ...]) -> None:
    """Diagnose log files, directories of logs, .gz files or - for stdin.

    Exit status: 0 no error found, 1 errors diagnosed, 2 usage or input error.
    """
    kb = _load_kb(kb_dirs)
    found = expand(list(paths))
    report = scan(Matcher(kb), found.sources, found.errors)
    _emit(report, fmt, verbose)
    sys.exit(report.exit_code())


def _emit(report: Report, fmt: str, verbose: bool) -> None:
    if fmt == "json":
        for err in report.errors:
            _console(stderr=True).print(f"[bold red]errmap:[/] {escape(err.path)}: {escape(err.reason)}")
        click.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print_report(_console(), report, verbose)


@main.command()
@click.option("--follow", "follow_path", type=click.Path(), metavar="FILE",
              help="Follow FILE like tail -F (waits for it, survives rotation and truncation).")
@format_option
@kb_option
def watch(follow_path: str | None, fmt: str, kb_dirs: tuple[str, ...]) -> None:
    """Diagnose a live log from stdin (or --follow FILE) as each line arrives.

    python train.py 2>&1 | tee train.log | errmap watch
    """
    kb = _load_kb(kb_dirs)
    matcher = Matcher(kb)
    triage = Triage()
    out = _console(stderr=fmt == "json")

    def on_new(item: Incident | Residue) -> None:
        if isinstance(item, Residue):
            out.print(f"[yellow]errmap: unrecognized error[/] [cyan]{escape(item.first.path)}:{item.first.lineno}[/]  {escape(item.first.text.strip()[:300])}")
        else:
            from errmap.report import diagnose

            print_diagnosis(out, diagnose(item), brief=item.entry.role == "consequence")
        out.file.flush()

    source = Source(follow_path or "-")
    report = Report([source], triage)
    try:
        if follow_path:
            from errmap.follow import follow_into

            follow_into(matcher, follow_path, triage, on_new, notice=lambda msg: out.print(f"[yellow]errmap:[/] {escape(msg)}"))
        else:
            scan_source(matcher, source, triage, on_new)
            if source.error:
                report.errors.append(_input_error(source))
    except KeyboardInterrupt:
        _summary(report, fmt)
        sys.exit(130)
    _summary(report, fmt)
    sys.exit(report.exit_code())


def _input_error(source: Source):
    from errmap.source import InputError

    return InputError(source.path, source.error or "unreadable")


def _summary(report: Report, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return
    con = _console()
    con.print("\n[bold]errmap summary[/]")
    print_report(con, report, verbose=False)


@main.command()
@click.argument("code")
@format_option
def explain(code: str, fmt: str) -> None:
    """Explain an error code (1012) or slug (triton-shared-memory)."""
    from errmap.explain import print_entry

    kb = _load_kb(())
    entry = kb.get(code)
    if entry is None:
        _console(stderr=True).print(f"[bold red]errmap:[/] no code {escape(code)}; `errmap list` shows them all")
        sys.exit(EXIT_INPUT)
    if fmt == "json":
        click.echo(json.dumps(entry.model_dump(mode="json"), indent=2, ensure_ascii=False))
    else:
        print_entry(_console(), entry)


@main.command("list")
@format_option
def list_cmd(fmt: str) -> None:
    """List every error code with its title."""
    kb = _load_kb(())
    if fmt == "json":
        click.echo(json.dumps([{"errno": e.errno, "slug": e.slug, "title": e.title, "role": e.role, "group": e.group} for e in kb], indent=2))
        return
    from rich.table import Table

    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("errno", "slug", "title", "role"):
        table.add_column(col)
    group = None
    for e in kb:
        if e.group != group:
            group = e.group
            table.add_row("", f"[bold]{escape(group)}[/]", "", "")
        table.add_row(str(e.errno), e.slug, escape(e.title), e.role)
    _console().print(table)


@main.group("kb")
def kb_group() -> None:
    """Knowledge-base maintenance."""


@kb_group.command("check")
@kb_option
def kb_check(kb_dirs: tuple[str, ...]) -> None:
    """Validate every KB entry; exit 1 with a list of problems."""
    from errmap.kbcheck import check

    problems = check([Path(p) for p in kb_dirs])
    con = _console()
    if problems:
        con.print(f"[bold red]{len(problems)} problem{'s' if len(problems) != 1 else ''}[/] in the knowledge base:")
        for p in problems:
            con.print(f"  {escape(p)}")
        sys.exit(1)
    con.print(f"[green]knowledge base OK[/]: {len(kbmod.load([Path(p) for p in kb_dirs]))} entries")


def run() -> None:
    """Entry point with the process-level behaviour a pipe tool needs."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL) if hasattr(signal, "SIGPIPE") else None
    main()


if __name__ == "__main__":
    run()
