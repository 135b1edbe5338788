"""`errmap explain`: a KB entry in the terminal, in the same sections as its docs page."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from errmap.kb import Entry
from errmap.probes import PROBES
from errmap.report import docs_url


def print_entry(con: Console, e: Entry) -> None:
    con.print(f"[bold red]{e.errno}[/] [bold]{escape(e.title)}[/]  [dim]{e.slug} · {escape(e.group)} · {e.role}[/]\n")
    con.print("[bold]What it means[/]")
    con.print(f"  {escape(e.summary)}\n")
    con.print("[bold]Messages it matches[/]")
    for a in e.anchors:
        con.print(f"  [cyan]{escape(' | '.join(a.literals))}[/]  [dim]{escape(a.source)}[/]")
    con.print("\n[bold]Why it happens[/]")
    con.print(f"  {escape(e.fill(e.cause, {}))}\n")
    con.print("[bold]How to fix[/]")
    for i, step in enumerate(e.fix, 1):
        con.print(f"  {i}. {escape(e.fill(step, {}))}")
    con.print("\n[bold]Upstream patches and references[/]")
    for link in e.links:
        fixed = f" (fixed in {link.fixed_in})" if link.fixed_in else ""
        con.print(f"  [dim]{link.kind:<7}[/] {escape(link.url)}\n          {escape(link.title)}{escape(fixed)}")
    if e.probes:
        con.print("\n[bold]How errmap confirms it[/]  [dim](errmap scan --probe)[/]")
        for name in e.probes:
            con.print(f"  [cyan]{name}[/]: {escape(PROBES.get(name, ''))}")
        for c in e.checks:
            con.print(f"  [dim]{c.verdict} when[/] {escape(c.says)}")
    if e.applies_to:
        con.print(f"\n[bold]Applies to[/]  {escape(e.applies_to)}")
    rel = [*e.related, *e.caused_by]
    if rel:
        label = "Usually caused by" if e.caused_by else "Related codes"
        con.print(f"\n[bold]{label}[/]  " + ", ".join(str(r) for r in rel))
    if url := docs_url(e.errno):
        con.print(f"\n[dim]docs:[/] {escape(url)}")
