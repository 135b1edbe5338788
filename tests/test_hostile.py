"""Hostile input: errmap answers every bad file calmly, loses no line and never shows a traceback."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, errmap, scan_json

USER_KB = str(ROOT / "tests" / "data" / "userkb")
TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 49152. Reducing block sizes or `num_stages` may help."
)


def lines_of(doc: dict) -> list[tuple[int, int]]:
    return [(d["errno"], d["line"]) for d in doc["diagnoses"]]


def calm(proc: subprocess.CompletedProcess) -> None:
    assert b"Traceback" not in proc.stderr and b"Traceback" not in proc.stdout, proc.stderr.decode()


def test_empty_file(tmp_path):
    (tmp_path / "e.log").write_bytes(b"")
    proc = errmap("scan", str(tmp_path / "e.log"))
    assert proc.returncode == 0 and b"No error found" in proc.stdout
    calm(proc)


@pytest.mark.parametrize(
    "data, line",
    [
        (b"\x00\x01\x02\xff" * 1000 + b"\n" + TRITON.encode() + b"\n\x00\x00", 2),  # binary with NULs
        (b"caf\xe9 \xc3\x28\n\xf0\x28\x8c\x28\n" + TRITON.encode(), 3),  # invalid UTF-8
        (("step 1\r\nstep 2\r\n" + TRITON + "\r\n").encode(), 3),  # CRLF
        (b"10%|#  |\r50%|### |\r100%|####|\n" + TRITON.encode() + b"\n", 2),  # tqdm \r bars
        (b"\x1b[2K\x1b[1A\x1b[31merror\x1b[0m\n\x1b[1;31m" + TRITON.encode() + b"\x1b[0m\n", 2),  # ANSI
        (("x\n" + TRITON + "\n").encode("utf-16"), 2),  # UTF-16 with BOM
    ],
    ids=["binary", "invalid-utf8", "crlf", "carriage-return", "ansi", "utf16"],
)
def test_odd_bytes(tmp_path, data, line):
    p = tmp_path / "odd.log"
    p.write_bytes(data)
    proc = errmap("scan", "--format", "json", str(p))
    calm(proc)
    assert (1012, line) in lines_of(json.loads(proc.stdout))


def test_200mb_line_bounded_memory(tmp_path):
    p = tmp_path / "huge.log"
    with open(p, "wb") as f:
        f.write(TRITON.encode() + b" ")
        block = b"x" * (1 << 20)
        for _ in range(200):
            f.write(block)
        f.write(b"\nafter\n" + TRITON.replace("81920", "99999").encode() + b"\n")
    # A small wrapper process runs the scan, so the peak it reports is errmap's own (a child forked
    # straight from this test process would start with the test process's pages counted).
    wrapper = (
        "import resource, subprocess, sys; "
        "p = subprocess.run([sys.executable, '-m', 'errmap', 'scan', '--format', 'json', sys.argv[1]], capture_output=True); "
        "sys.stdout.buffer.write(p.stdout); "
        "sys.stderr.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, str(p)], capture_output=True, cwd=ROOT, timeout=300)
    peak_mb = int(proc.stderr.decode().strip().splitlines()[-1]) / 1024
    doc = json.loads(proc.stdout)
    d = doc["diagnoses"][0]
    assert d["errno"] == 1012 and d["line"] == 1 and d["evidence"][0]["cut"] is True
    assert doc["sources"][0]["lines"] == 3
    assert peak_mb < 100, f"peak RSS {peak_mb:.0f} MB"


def test_gzip_and_truncated_gzip(tmp_path):
    body = ("step\n" * 20000 + TRITON + "\n" + "step\n" * 20000).encode()
    gz = gzip.compress(body)
    (tmp_path / "a.log.gz").write_bytes(gz)
    assert lines_of(scan_json(tmp_path / "a.log.gz")) == [(1012, 20001)]
    (tmp_path / "cut.log.gz").write_bytes(gz[: len(gz) * 2 // 3])
    proc = errmap("scan", str(tmp_path / "cut.log.gz"))
    calm(proc)
    assert proc.returncode == 1 and b"1012" in proc.stdout and b"gzip data ends early" in proc.stdout


def test_directory_and_missing_file(tmp_path):
    good = tmp_path / "good.log"
    good.write_text(TRITON + "\n")
    follow_dir = errmap("watch", "--follow", str(tmp_path))
    assert follow_dir.returncode == 2 and b"is a directory" in follow_dir.stdout + follow_dir.stderr
    calm(follow_dir)
    proc = errmap("scan", str(tmp_path / "missing.log"), str(good))
    calm(proc)
    out = proc.stdout.decode()
    assert proc.returncode == 2 and "missing.log: no such file or directory" in out
    assert "1012" in out  # the other file was still scanned


def _as_nobody():
    os.setgid(65534)
    os.setuid(65534)


def test_unreadable_file(tmp_path):
    secret = tmp_path / "secret.log"
    secret.write_text(TRITON + "\n")
    secret.chmod(0)
    if os.geteuid() == 0:
        try:
            subprocess.run([sys.executable, "-c", "import errmap"], preexec_fn=_as_nobody, cwd=ROOT, check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            pytest.skip("running as root and this Python cannot run as another user: no file can be unreadable")
    tmp_path.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, "-m", "errmap", "scan", str(secret)], capture_output=True, cwd=ROOT,
        preexec_fn=_as_nobody if os.geteuid() == 0 else None, timeout=120,
    )
    calm(proc)
    assert proc.returncode == 2 and b"secret.log: permission denied" in proc.stdout


def test_broken_pipe_is_quiet(tmp_path):
    p = tmp_path / "many.log"
    p.write_text("".join(f"Thing{i}Error: distinct failure {i}\n".replace(str(i), chr(97 + i % 26) * (i % 7 + 1)) for i in range(6000)))
    p.write_text("".join(f"Kind{n}Error: boom\n" for n in range(6000)))
    shell = f"{sys.executable} -m errmap scan --verbose {p} | head -1"
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, cwd=ROOT, timeout=120)
    assert proc.stdout.count(b"\n") == 1
    assert proc.stderr == b"", proc.stderr.decode()


def test_stdin_closed_early():
    proc = subprocess.run([sys.executable, "-m", "errmap", "watch"], stdin=subprocess.DEVNULL, capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and b"No error found" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "errmap", "scan", "-"], stdin=subprocess.DEVNULL, capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0


WRITER = textwrap.dedent(
    """
    import os, sys, time
    path, n = sys.argv[1], int(sys.argv[2])
    f = open(path, "w")
    for i in range(1, n + 1):
        line = f"errmap-test-marker {i}\\n"
        f.write(line[:8]); f.flush(); time.sleep(0.001)   # a partial line first
        f.write(line[8:]); f.flush()
        if i % 60 == 0:                  # rotation: rename, then a new file
            f.close(); os.replace(path, path + ".1"); f = open(path, "w")
        elif i % 60 == 30:               # copytruncate: the reader has had time to read, then truncate
            time.sleep(0.5); f.truncate(0); f.seek(0); time.sleep(0.5)
        time.sleep(0.002)
    f.close()
    """
)


def test_follow_counts_each_line_once_through_rotation_and_truncation(tmp_path):
    n = 200
    log = tmp_path / "train.log"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "errmap", "watch", "--follow", str(log), "--kb", USER_KB, "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    try:
        first = ""
        while "waiting for" not in first:  # errmap is up before the file exists
            first = watcher.stderr.readline().decode()
            assert first, "watch ended before waiting for the file"
        writer = subprocess.run([sys.executable, "-c", WRITER, str(log), str(n)], timeout=120)
        assert writer.returncode == 0
        time.sleep(1.5)
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
    assert watcher.returncode == 130, err.decode()
    doc = json.loads(out)
    counts = {d["captures"]["n"]: d["count"] for d in doc["diagnoses"] if d["errno"] == 9001}
    assert counts == {str(i): 1 for i in range(1, n + 1)}, err.decode()
    notices = err.decode()
    assert "rotated" in notices and "truncated" in notices
