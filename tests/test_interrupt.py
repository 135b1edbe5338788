"""A user's Ctrl-C is said as an interrupt, never as an unknown error: `errmap run` on a real terminal and in
pipes with a real SIGINT, and `scan` of the log such a run left (a traceback ending in KeyboardInterrupt)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time

from conftest import ROOT, errmap

PY = sys.executable
WAIT = 60
SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(300)\n"


def test_ctrl_c_on_a_terminal_is_an_interrupt_with_the_shells_status():
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(ROOT)
            argv = [PY, "-m", "errmap", "run", "--", PY, "-c", SLEEPER]
            os.execvpe(argv[0], argv, {**os.environ, "COLUMNS": "80", "ERRMAP_LANG": "en"})
        finally:
            os._exit(127)
    seen, status = b"", None
    try:
        deadline = time.monotonic() + WAIT
        while b"ready" not in seen:
            assert time.monotonic() < deadline, seen
            if select.select([fd], [], [], 1)[0]:
                seen += os.read(fd, 65536)
        os.write(fd, b"\x03")  # the Ctrl-C key, as typed
        while status is None:
            assert time.monotonic() < deadline, seen
            try:
                if select.select([fd], [], [], 0.2)[0]:
                    seen += os.read(fd, 65536)
            except OSError:
                pass
            done, st = os.waitpid(pid, os.WNOHANG)
            status = os.waitstatus_to_exitcode(st) if done else None
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    text = seen.decode(errors="replace")
    assert status == 130, text
    assert "KeyboardInterrupt" in text  # the command's own traceback passed through
    summary = text.split("errmap summary")[1]
    assert "Interrupted (Ctrl-C)" in summary and "status 130" in summary, summary
    assert "not in the knowledge base" not in text and "unrecognized" not in text and "failed" not in summary


def test_sigint_in_pipes_then_scan_of_the_log(tmp_path):
    log = tmp_path / "train.log"
    report = tmp_path / "report.json"
    proc = subprocess.Popen([PY, "-m", "errmap", "run", "--format", "json", "--report", str(report), "--log", str(log),
                             "--", PY, "-c", SLEEPER],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        proc.kill()
    assert proc.returncode == 130, err.decode()
    assert "Interrupted (Ctrl-C)" in err.decode() and "unrecognized" not in err.decode()
    doc = json.loads(report.read_text())
    assert doc["command"] == {"status": 130, "signal": "SIGINT", "interrupted": True}
    assert doc["unrecognized"] == [] and doc["diagnoses"] == []
    assert log.read_text().rstrip().endswith("KeyboardInterrupt")
    # the log of that run, scanned: an interrupt, with the shells' status; not an unknown error
    scanned = errmap("scan", str(log))
    text = " ".join(scanned.stdout.decode().split())
    assert scanned.returncode == 130, text
    assert f"Interrupted (Ctrl-C): the run was stopped by its user (KeyboardInterrupt at {log}:" in text
    assert "not in the knowledge base" not in text and "No error found" not in text
    doc = json.loads(errmap("scan", "--format", "json", str(log)).stdout)
    assert doc["unrecognized"] == [] and doc["interrupted"]["text"] == "KeyboardInterrupt"
    # an error before the interrupt is still one
    log.write_text("ValueError: the flux capacitor broke\n" + log.read_text())
    assert errmap("scan", str(log)).returncode == 1
