"""One numbering of fix steps: a step's place in its KB entry, 1..N. `explain` and the docs list every step in that
order; scan shows the steps that fit the run under the same numbers, so step N is the same step everywhere."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from errmap.commands import docs
from errmap.commands.explain import print_entry

from conftest import ROOT, errmap

TORCHRUN_OOM = ROOT / "fixtures/1017/torchrun-cuda-error-oom.log"
NUMBERED = re.compile(r"^ *(\d+)\. (.*)")


def explained(kb, matcher, errno: int) -> dict[int, str]:
    con = Console(file=io.StringIO(), width=400, highlight=False, soft_wrap=True, color_system=None)
    print_entry(con, kb.entries[errno], kb, matcher)
    fix = con.file.getvalue().split("How to fix", 1)[1].split("Why it happens", 1)[0]
    return {int(m[1]): m[2] for line in fix.splitlines() if (m := NUMBERED.match(line))}


def documented(kb, matcher, errno: int) -> dict[int, str]:
    page = docs.errno_page(kb.entries[errno], kb, matcher, None)
    fix = page.split("How to fix", 1)[1].split("Why it happens", 1)[0]
    return {int(m[1]): m[2] for line in fix.splitlines() if (m := NUMBERED.match(line))}


@pytest.mark.parametrize("errno", [1001, 1012, 1017, 1033])
def test_explain_and_the_docs_number_every_step_in_the_kbs_order(kb, matcher, errno):
    n = len(kb.entries[errno].fix)
    assert list(explained(kb, matcher, errno)) == list(range(1, n + 1))
    assert list(documented(kb, matcher, errno)) == list(range(1, n + 1))


def test_scan_shows_the_steps_that_fit_under_their_kb_numbers(kb, matcher):
    d = json.loads(errmap("scan", "--format", "json", str(TORCHRUN_OOM)).stdout)["diagnoses"][0]
    assert d["framework"] == "pytorch" and d["fix_numbers"] == sorted(d["fix_numbers"]) and d["fix_numbers"][0] > 1
    explain, page = explained(kb, matcher, 1017), documented(kb, matcher, 1017)
    for n, text in zip(d["fix_numbers"], d["fix"]):
        assert explain[n].endswith(text[:60]) or text[:60] in explain[n], (n, text, explain[n])
        assert text.split()[0] in page[n], (n, text, page[n])
    out = errmap("scan", str(TORCHRUN_OOM), env={"COLUMNS": "200"}).stdout.decode()
    shown = [int(m[1]) for line in out.splitlines() if (m := re.match(r"^ +(?:Fix)? +(\d+)\. ", line))]
    assert shown and shown == d["fix_numbers"][:len(shown)], out


def test_a_step_that_names_its_stack_is_not_labelled_again(kb, matcher):
    """The docs and explain name a step's stack only where its text does not ('verl: verl: ...' never)."""
    page = "\n".join(documented(kb, matcher, 1009).values())
    assert "verl: verl" not in page and "*(verl)* verl" not in page and "**verl:**" not in page
    assert all(not text.startswith("(verl) verl") for text in explained(kb, matcher, 1009).values())
