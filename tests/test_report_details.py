"""Details of what errmap prints: a live header wraps whole under its title, a cause reads as English with or
without its captures, a step never points at steps that may be hidden, the note on brief diagnoses only where one
is brief; and the suite's own children take a Ctrl-C as a user's errmap does, however the suite was started."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, errmap

MISSING_PACKAGES = "fixtures/1008/transformers-remote-code-missing-packages.log"  # a header of 83 columns
WATCHDOG = "fixtures/1025/torchrun-watchdog-heartbeat-stuck.log"
TWO_ROOTS = "fixtures/1001/h200-plain-cuda-binary-sm80-only.log"  # 1001 and 1005 in one run
BRIEF_NOTE = "Diagnoses after the first are brief"


def test_a_live_header_wraps_whole_under_its_title():
    lines = errmap("watch", input=(ROOT / MISSING_PACKAGES).read_bytes(), env={"COLUMNS": "80"}).stdout.decode().splitlines()
    assert lines[0].startswith("1008 Python package missing") and lines[1] == "     module-not-found · once", lines[:3]
    assert not any(line.rstrip().endswith("·") or line.startswith("once") for line in lines)


def test_a_collectives_name_reads_as_english():
    d = json.loads(errmap("scan", "--format", "json", WATCHDOG).stdout)["diagnoses"][0]
    assert d["errno"] == 1025 and d["cause"].startswith("The ALLREDUCE collective"), d["cause"]


def test_no_step_points_at_steps_that_may_be_hidden(kb):
    assert not [(e.errno, s.text) for e in kb for s in e.fix if "(below)" in s.text or "see below" in s.text]


def test_the_note_on_brief_diagnoses_only_where_one_is_brief():
    assert BRIEF_NOTE in errmap("scan", TWO_ROOTS).stdout.decode()
    # two logs, two runs: the first diagnosis of each is whole
    two_runs = errmap("scan", "fixtures/1033/trl-grpo-no-prompt-column.log", "fixtures/1008/torchrun-liger-kernel-missing.log")
    assert two_runs.stdout.decode().count("Cause ") == 2 and BRIEF_NOTE not in two_runs.stdout.decode()


def test_children_of_a_suite_started_with_sigint_ignored_take_ctrl_c():
    """As `nohup pytest &` starts it: SIGINT ignored, which every child inherits unless conftest resets it."""
    child = f"""
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.path.insert(0, {str(ROOT / "tests")!r})
import conftest  # noqa: F401
p = subprocess.Popen([sys.executable, "-m", "errmap", "watch", "--passthrough"], cwd={str(ROOT)!r},
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
p.stdin.write(b"ready\\n"); p.stdin.flush()
p.stdout.readline()  # echoed: watch is reading, its handlers in place
p.send_signal(signal.SIGINT)
try:
    print(p.wait(timeout=20))
except subprocess.TimeoutExpired:
    p.kill(); print("ignored")
"""
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=60, cwd=ROOT)
    assert out.stdout.decode().strip() == "130", out
