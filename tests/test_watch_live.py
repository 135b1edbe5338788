"""`errmap watch` on real pipes and signals: passthrough, the summary on Ctrl-C and SIGTERM, line counts."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, errmap

TRITON = b"triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 49152."
BF16 = b"RuntimeError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla P40 GPU has compute capability 6.1."


def read_until(stream, want: bytes) -> bytes:
    seen = b""
    while want not in seen:
        data = os.read(stream.fileno(), 1 << 16)
        assert data, f"stream ended before {want!r}; got {seen!r}"
        seen += data
    return seen


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_watch_reports_everything_read_including_the_unfinished_line(tmp_path, sig, status):
    report = tmp_path / "r.json"
    p = subprocess.Popen([sys.executable, "-m", "errmap", "watch", "--passthrough", "--report", str(report)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    p.stdin.write(b"step 1\nstep 2\n" + TRITON + b"\n" + BF16)  # the last line has no newline yet
    p.stdin.flush()
    read_until(p.stdout, BF16)  # passthrough echoed it: watch has read every byte
    p.send_signal(sig)
    p.wait(timeout=60)  # ended by the signal, stdin still open (communicate would close it: end of input)
    out, err = p.communicate(timeout=60)
    assert p.returncode == status and b"Traceback" not in err, err
    doc = json.loads(report.read_text())
    assert {d["errno"] for d in doc["diagnoses"]} == {1012, 1009}
    assert doc["sources"][0]["lines"] == 4
    assert b"errmap summary" in err and b"4 lines" in err


def test_passthrough_keeps_stdout_the_log_and_diagnoses_on_stderr():
    data = b"step 1\r\nloss 0.1\n" + TRITON + b"\n"
    proc = errmap("watch", "--passthrough", input=data)
    assert proc.stdout == data
    assert proc.returncode == 1 and b"1012" in proc.stderr


def test_watch_without_passthrough_prints_only_diagnoses():
    proc = errmap("watch", input=b"step 1\n" + TRITON + b"\n")
    assert b"step 1" not in proc.stdout and b"1012" in proc.stdout and b"2 lines" in proc.stdout


def test_watch_on_a_terminal_says_what_it_expects():
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "errmap", "watch"], stdin=slave, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT)
    os.close(slave)
    said = read_until(p.stderr, b"Ctrl-D")
    assert b"errmap watch" in said and b"--follow" in said and b"errmap run" in said
    os.write(master, b"\x04")  # Ctrl-D: end of input
    out, _ = p.communicate(timeout=60)
    os.close(master)
    assert p.returncode == 0 and b"No error found" in out


def test_follow_counts_the_lines_it_read_and_keeps_the_unfinished_one(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1\nstep 2\n" + TRITON + b"\n" + BF16)  # the last line has no newline yet
    report = tmp_path / "r.json"
    p = subprocess.Popen([sys.executable, "-m", "errmap", "watch", "--follow", str(log), "--report", str(report)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    read_until(p.stdout, b"1012")  # the live diagnosis of line 3: it is following
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and b"Traceback" not in err
    doc = json.loads(report.read_text())
    assert {d["errno"] for d in doc["diagnoses"]} == {1012, 1009}
    assert doc["sources"][0]["lines"] == 4
