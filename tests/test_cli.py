"""The CLI as a user runs it: real subprocesses, real pipes, real files."""

from __future__ import annotations

import gzip
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, errmap, scan_json

USER_KB = str(ROOT / "tests" / "data" / "userkb")
TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 49152. Reducing block sizes or `num_stages` may help.\n"
)
CONTRACT = {"errno", "slug", "title", "role", "line", "count", "evidence", "captures", "fix", "links"}


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def test_scan_reports_1012_with_both_numbers(tmp_path):
    log = write(tmp_path, "train.log", "step 1\n" + TRITON)
    proc = errmap("scan", str(log))
    out = proc.stdout.decode()
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert "1012" in out and "81920" in out and "49152" in out and "more step" in out


def test_json_contract(tmp_path):
    log = write(tmp_path, "train.log", "step 1\n" + TRITON)
    doc = scan_json(log)
    assert doc["version"] == 1
    assert doc["sources"][0]["path"] == str(log) and doc["sources"][0]["lines"] == 2
    (d,) = doc["diagnoses"]
    assert CONTRACT <= d.keys()
    assert (d["errno"], d["slug"], d["role"], d["line"], d["count"]) == (1012, "triton-shared-memory", "root", 2, 1)
    assert d["captures"] == {"required": "81920", "limit": "49152"}
    assert "81920" in d["cause"] and d["links"][0]["url"].startswith("https://")


def test_exit_codes(tmp_path):
    clean = write(tmp_path, "clean.log", "step 1 loss 0.3\nstep 2 loss 0.2\n")
    assert errmap("scan", str(clean)).returncode == 0
    assert errmap("scan", str(write(tmp_path, "bad.log", TRITON))).returncode == 1
    missing = errmap("scan", str(tmp_path / "nope.log"))
    assert missing.returncode == 2
    assert b"nope.log" in missing.stderr + missing.stdout and b"Traceback" not in missing.stderr
    assert errmap("scan").returncode == 2  # usage error


def test_missing_file_does_not_stop_the_others(tmp_path):
    bad = write(tmp_path, "bad.log", TRITON)
    proc = errmap("scan", "--format", "json", str(tmp_path / "missing.log"), str(bad))
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert [d["errno"] for d in doc["diagnoses"]] == [1012]
    assert any(s.get("error") for s in doc["sources"])


def test_stdin_and_gzip(tmp_path):
    proc = errmap("scan", "-", input=TRITON.encode())
    assert proc.returncode == 1 and b"1012" in proc.stdout
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(("ok\n" * 1000 + TRITON).encode()))
    doc = scan_json(gz)
    assert doc["diagnoses"][0]["line"] == 1001


def test_unknown_traceback_is_unrecognized_exit_1(tmp_path):
    log = write(tmp_path, "t.log", "Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\nZorgError: the flux failed\n")
    proc = errmap("scan", "--format", "json", str(log))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["diagnoses"] == [] and doc["unrecognized"][0]["type"] == "ZorgError"
    assert doc["unrecognized"][0]["line"] == 3


def test_watch_prints_before_the_pipe_closes():
    proc = subprocess.Popen(
        [sys.executable, "-m", "errmap", "watch", "--kb", USER_KB],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    try:
        proc.stdin.write(b"step 1 loss 0.1\nerrmap-test-marker 7\n")
        proc.stdin.flush()
        seen = b""
        deadline = time.monotonic() + 60
        while b"9001" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1)
            if ready:
                seen += os.read(proc.stdout.fileno(), 65536)
        assert b"9001" in seen, "no diagnosis while the pipe was open"
        assert proc.poll() is None  # still running: the pipe is open
        proc.stdin.write(b"errmap-test-marker 7\n" * 5)
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(30) == 1
        assert b"summary" in rest and b"6x" in rest
    finally:
        proc.kill()


def test_watch_ctrl_c_prints_summary_and_exits_130():
    proc = subprocess.Popen(
        [sys.executable, "-m", "errmap", "watch", "--kb", USER_KB],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    proc.stdin.write(b"errmap-test-marker 1\n")
    proc.stdin.flush()
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"summary" in out and b"Traceback" not in err


def test_watch_json_at_end():
    proc = errmap("watch", "--format", "json", input=TRITON.encode() * 8)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["diagnoses"][0]["count"] == 8


def test_explain_and_list():
    proc = errmap("explain", "1012")
    assert proc.returncode == 0 and b"Triton" in proc.stdout and b"How to fix" in proc.stdout
    assert errmap("explain", "triton-shared-memory").stdout == proc.stdout
    assert errmap("explain", "9999").returncode == 2
    listed = errmap("list")
    assert listed.returncode == 0 and b"1012" in listed.stdout
    assert listed.stdout.startswith(b"GPU platform") and not listed.stdout.endswith(b"\n\n")  # no blank line at either end


def test_help_examples_are_whole_commands_at_80_columns():
    for lang in ("en", "zh"):
        doctor = errmap("doctor", "--help", env={"COLUMNS": "80", "ERRMAP_LANG": lang}).stdout.decode().splitlines()
        assert "  errmap doctor --data train.parquet -- \\" in doctor
        assert "      trainer.n_gpus_per_node=8 data.max_prompt_length=4096" in doctor
        explain = errmap("explain", "--help", env={"COLUMNS": "80", "ERRMAP_LANG": lang}).stdout.decode().splitlines()
        assert "  errmap explain 'CUDA error: device-side assert triggered'" in explain
    assert "the text matches 1015" in errmap("explain", "CUDA error: device-side assert triggered").stderr.decode()


def test_kb_check_names_file_and_line(tmp_path):
    bad = tmp_path / "kb"
    bad.mkdir()
    (bad / "9002-broken.yaml").write_text(
        "errno: 9002\nslug: broken\ntitle: Broken entry\ngroup: Tests\nrole: sideways\n"
    )
    proc = errmap("kb", "check", "--kb", str(bad))
    out = proc.stdout.decode()
    assert proc.returncode == 1
    assert "9002-broken.yaml:5: role" in out
    (bad / "9002-broken.yaml").write_text("errno: [unclosed\n")
    assert "9002-broken.yaml:2: invalid YAML" in errmap("kb", "check", "--kb", str(bad)).stdout.decode()
    assert errmap("kb", "check").returncode == 0
