"""`errmap run` under a real pseudo-terminal and real pipes: exact log bytes, typed input, a reader that
leaves, and a failed command's status as evidence."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time

from conftest import ROOT, errmap

PY = sys.executable


def run_on_terminal(args: list[str], typed: tuple[tuple[bytes, bytes], ...] = (), timeout: float = 60) -> tuple[int, bytes]:
    """errmap in a session of its own whose controlling terminal is a real pty (as in a shell: errmap is the
    foreground job); each (prompt, text) of `typed` is typed into that terminal once its prompt shows there."""
    master, slave = pty.openpty()
    p = subprocess.Popen([PY, "-m", "errmap", *args], stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                         env={**os.environ, "COLUMNS": "120"}, start_new_session=True,
                         preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            seen += data
            if typed and typed[0][0] in seen:
                os.write(master, typed[0][1])
                seen, typed = seen.replace(typed[0][0], b"", 1), typed[1:]
        elif p.poll() is not None:
            break
    else:
        os.killpg(p.pid, signal.SIGKILL)
        raise AssertionError(f"errmap run hung on a terminal; it printed {seen!r}")
    os.close(master)
    return p.wait(timeout=30), seen


def test_log_holds_the_bytes_the_command_wrote_in_both_modes(tmp_path):
    child = "import sys; sys.stdout.write('one\\ntwo\\r\\nthree\\rfour\\n')"
    want = b"one\ntwo\r\nthree\rfour\n"
    status, shown = run_on_terminal(["run", "--log", str(tmp_path / "tty.log"), "--", PY, "-c", child])
    assert status == 0 and b"three" in shown
    assert (tmp_path / "tty.log").read_bytes() == want  # no CR added by the pseudo-terminal
    proc = errmap("run", "--log", str(tmp_path / "pipe.log"), "--", PY, "-c", child)
    assert proc.returncode == 0 and proc.stdout == want
    assert (tmp_path / "pipe.log").read_bytes() == want


def test_a_command_that_reads_the_terminal_gets_what_is_typed(tmp_path):
    # input() reads stdin, getpass reads /dev/tty: both are the command's own terminal, fed from errmap's
    child = (
        "import getpass; print('ready', flush=True); a = input(); b = getpass.getpass('token: ');"
        "print('got', a, len(b), flush=True)"
    )
    status, shown = run_on_terminal(["run", "--", PY, "-c", child], typed=((b"ready", b"yes\n"), (b"token: ", b"secret\n")))
    assert status == 0, shown
    assert b"got yes 6" in shown


def test_a_reader_that_leaves_stops_neither_the_command_nor_the_log(tmp_path):
    log = tmp_path / "train.log"
    child = "import sys\nfor i in range(20001): print(i)\nprint('triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 49152.', file=sys.stderr)\nsys.exit(1)"
    p = subprocess.Popen([PY, "-m", "errmap", "run", "--log", str(log), "--", PY, "-c", child],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stdout.readline() == b"0\n"
    p.stdout.close()  # as `| head -1` does
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1  # the command's own status, not SIGPIPE's 141
    assert len(log.read_text().splitlines()) == 20002
    assert b"1012" in err and b"Traceback" not in err


def test_a_killed_command_is_never_no_error(tmp_path):
    proc = errmap("run", "--", "bash", "-c", "echo hi; kill -9 $$")
    assert proc.returncode == 137
    err = proc.stderr.decode()
    assert "No error found" not in err and "failed with status 137 (killed by SIGKILL)" in err and "1021" in err
    proc = errmap("run", "--report", str(tmp_path / "r.json"), "--", "bash", "-c", "echo hi; exit 3")
    assert proc.returncode == 3 and "failed" in proc.stderr.decode() and "No error found" not in proc.stderr.decode()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["command"] == {"status": 3} and doc["diagnoses"] == []


def test_report_file_holds_the_machine_format_and_stderr_stays_the_commands(tmp_path):
    child = "import sys; print('own stderr', file=sys.stderr); print('triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 49152.', file=sys.stderr); sys.exit(1)"
    proc = errmap("run", "--format", "json", "--report", str(tmp_path / "r.json"), "--", PY, "-c", child)
    assert proc.returncode == 1 and b"own stderr" in proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["diagnoses"][0]["errno"] == 1012 and doc["command"]["status"] == 1
    proc = errmap("scan", "--format", "sarif", "--report", str(tmp_path / "r.sarif"), "fixtures/1009/journald-prefix.log")
    assert proc.returncode == 1 and b"1009" in proc.stdout and not proc.stdout.startswith(b"{")
    assert json.loads((tmp_path / "r.sarif").read_text())["version"] == "2.1.0"
