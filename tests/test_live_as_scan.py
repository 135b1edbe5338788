"""`errmap watch` (a real pipe) and `errmap run` (a real subprocess) say what `errmap scan` says of the same bytes, on
every fixture: the same codes in the same order, each with the same steps and links, for the stack, GPU and releases
the lines read so far name; what the rest of the log changes is said again (jsonl) or whole in the summary (text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT, errmap

TCPSTORE = "fixtures/1025/torch-tcpstore-wait-timeout-key.log"
TRL_COLUMN = "fixtures/1033/trl-grpo-no-prompt-column.log"


def said(d: dict) -> tuple:
    return d["errno"], d["line"], d["fix"], d.get("fix_numbers"), [link["url"] for link in d["links"]]


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    logs = sorted(str(p.relative_to(ROOT)) for p in FIXTURES.rglob("*.log"))
    proc = subprocess.run([sys.executable, "tests/live_driver.py", *logs], capture_output=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "ERRMAP_LANG": "en"})
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout)
    assert len(out) == len(logs) > 400
    return out


def test_run_summary_is_scans_report_on_every_fixture(reports):
    wrong = {log: ([said(d) for d in r["scan"]["diagnoses"]], [said(d) for d in r["run"]["diagnoses"]])
             for log, r in reports.items() if [said(d) for d in r["scan"]["diagnoses"]] != [said(d) for d in r["run"]["diagnoses"]]}
    assert not wrong, wrong


def test_watch_says_live_what_scan_says_on_every_fixture(reports):
    """Each diagnosis as watch last wrote it (live, or again at the end where lines after it named the stack) is
    scan's, in the order scan ranks them where nothing was said again."""
    wrong = {}
    for log, r in reports.items():
        last: dict[tuple, tuple] = {}
        for d in r["watch"]:
            if d.get("withdrawn"):
                del last[d["errno"], d["line"]]
            elif "errno" in d:
                last[d["errno"], d["line"]] = said(d)
        scan = [said(d) for d in r["scan"]["diagnoses"]]
        if sorted(last.values(), key=repr) != sorted(scan, key=repr):
            wrong[log] = (scan, list(last.values()))
    assert not wrong, wrong


def test_a_stack_read_before_the_failure_gives_its_own_steps_live(reports):
    live = [d for d in reports[TRL_COLUMN]["watch"] if "errno" in d]
    assert [d["framework"] for d in live] == ["trl"] and not any(d.get("updated") for d in live)
    assert all(step.startswith("TRL:") for step in live[0]["fix"]), live[0]["fix"]


def test_a_stack_named_after_the_failure_updates_what_was_said(reports):
    """torchrun names the run PyTorch's only in its ChildFailedError, after the rank's OOM was printed."""
    log = "fixtures/1017/torchrun-cuda-error-oom.log"
    oom = [d for d in reports[log]["watch"] if d.get("errno") == 1017]
    assert [(d["framework"], d.get("updated", False)) for d in oom] == [(None, False), ("pytorch", True)]
    assert not any(s.startswith("verl:") for s in oom[-1]["fix"])


@pytest.mark.parametrize("command", [["watch"], ["run", "--", "cat", TCPSTORE]])
def test_a_consequence_alone_gets_its_cause_and_fix_live(command):
    """A rendezvous-store timeout with nothing before it: the live diagnosis is whole, as scan's is."""
    proc = errmap(*command, input=(ROOT / TCPSTORE).read_bytes() if command == ["watch"] else None,
                  env={"COLUMNS": "80"})
    out = (proc.stdout if command == ["watch"] else proc.stderr).decode()
    live, summary = out.split("errmap summary")
    assert "Find the rank that stopped first" in live and "Cause" in live, out
    assert "Find the rank that stopped first" not in summary  # said once: the summary keeps it to its header


def test_the_summary_shows_whole_what_the_rest_of_the_log_changed():
    proc = errmap("watch", input=(ROOT / "fixtures/1017/torchrun-cuda-error-oom.log").read_bytes(), env={"COLUMNS": "80"})
    live, summary = proc.stdout.decode().split("errmap summary")
    assert "Fix" in live and "Fix" in summary, summary
