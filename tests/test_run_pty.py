"""`errmap run` as a user at a terminal runs it (a real pseudo-terminal through pty.fork), and in
pipelines (real pipes, real signals): prompts, Ctrl-C, the log's bytes, `| head`, SIGHUP,
background processes left behind, stdout and stderr lines that must not glue."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time

from conftest import ROOT

PY = sys.executable
ERRMAP = [PY, "-m", "errmap"]
TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 49152. Reducing block sizes or `num_stages` may help."
)
WAIT = 60  # seconds before a test that waits on output gives up (a failure, never a pass)


class Terminal:
    """A program on its own pseudo-terminal, as in a terminal window: session leader, foreground."""

    def __init__(self, argv: list[str]):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its stdin, stdout, stderr and controlling terminal
            try:
                os.chdir(ROOT)
                os.execvpe(argv[0], argv, {**os.environ, "COLUMNS": "120"})
            finally:
                os._exit(127)
        self.seen = b""
        self.status: int | None = None

    def expect(self, text: bytes, timeout: float = WAIT) -> bytes:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} on the terminal; it shows {self.seen[-2000:]!r}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the program has exited and closed the terminal
                    chunk = b""
                assert chunk, f"the terminal closed before {text!r}; it shows {self.seen[-2000:]!r}"
                self.seen += chunk
        return self.seen

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait(self, timeout: float = WAIT) -> int:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if select.select([self.fd], [], [], 0.2)[0]:
                    self.seen += os.read(self.fd, 65536)
            except OSError:
                pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            assert time.monotonic() < deadline, f"still running; the terminal shows {self.seen[-2000:]!r}"

    def close(self) -> None:
        if self.status is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def answered(argv: list[str], prompt: bytes, answer: bytes, reply: bytes) -> Terminal:
    """argv on a terminal: its prompt answered, its reply seen, its exit status 0."""
    t = Terminal(argv)
    try:
        t.expect(prompt)
        t.type(answer)
        t.expect(reply)
        assert t.wait() == 0
    finally:
        t.close()
    return t


def test_a_prompt_in_a_terminal_gets_its_answer(tmp_path):
    """A command reading stdin (a login prompt) was stopped in the background for good."""
    child = "name = input('your name? '); print('hello', name)"
    answered([*ERRMAP, "run", "--", PY, "-c", child], b"your name? ", b"bob\r", b"hello bob")


def test_getpass_reads_the_terminal_without_echo(tmp_path):
    child = "import getpass; token = getpass.getpass('token: '); print('length', len(token))"
    t = answered([*ERRMAP, "run", "--log", str(tmp_path / "l"), "--", PY, "-c", child], b"token: ", b"s3cret\r", b"length 6")
    assert b"s3cret" not in t.seen and b"s3cret" not in (tmp_path / "l").read_bytes()


def test_ctrl_c_reaches_the_command_then_a_second_one_ends_errmap(tmp_path):
    child = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, lambda *a: print('child got SIGINT', flush=True))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    t = Terminal([*ERRMAP, "run", "--", PY, "-c", child])
    try:
        t.expect(b"ready")
        t.type(b"\x03")
        t.expect(b"child got SIGINT")
        t.expect(b"press Ctrl-C again")
        t.type(b"\x03")
        assert t.wait() == 128 + signal.SIGKILL
    finally:
        t.close()
    assert b"killed by SIGKILL after a second Ctrl-C" in t.seen
    assert b"1021" not in t.seen  # errmap killed it: no OOM guess


def test_the_terminal_is_restored_after_the_run():
    script = f"stty -g; {' '.join(ERRMAP)} run -- {PY} -c 'print(1)'; stty -g"
    t = Terminal(["bash", "-c", script])
    try:
        assert t.wait() == 0
    finally:
        t.close()
    settings = [line for line in t.seen.decode().split("\r\n") if line.count(":") > 10]
    assert len(settings) == 2 and settings[0] == settings[1], t.seen


CHILD_BYTES = "import sys; sys.stdout.buffer.write(b'one\\ntwo\\r\\nbar 10%\\rbar 100%\\nlast'); sys.stdout.flush()"
EXACT = b"one\ntwo\r\nbar 10%\rbar 100%\nlast"


def test_the_log_holds_the_commands_bytes_on_a_terminal(tmp_path):
    log = tmp_path / "pty.log"
    t = Terminal([*ERRMAP, "run", "--log", str(log), "--", PY, "-c", CHILD_BYTES])
    try:
        assert t.wait() == 0
    finally:
        t.close()
    assert log.read_bytes() == EXACT  # no CRLF from the pseudo-terminal
    assert b"one\r\ntwo" in t.seen  # the screen still gets its carriage returns


def test_the_log_holds_the_commands_bytes_in_a_pipe(tmp_path):
    log = tmp_path / "pipe.log"
    proc = subprocess.run([*ERRMAP, "run", "--log", str(log), "--", PY, "-c", CHILD_BYTES],
                          capture_output=True, cwd=ROOT, timeout=WAIT)
    assert proc.returncode == 0 and proc.stdout == EXACT
    assert log.read_bytes() == EXACT


def test_a_closed_reader_does_not_stop_the_command_or_the_log(tmp_path):
    """`errmap run --log L -- cmd | head -1`: errmap died of SIGPIPE, and the command with it."""
    log, go = tmp_path / "train.log", tmp_path / "go"
    child = (
        "import os, sys, time\n"
        "print('line 0', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "for i in range(1, 20001): print('line', i)\n"
        f"print({TRITON!r}, file=sys.stderr)\n"
        "sys.exit(4)\n"
    )
    proc = subprocess.Popen([*ERRMAP, "run", "--log", str(log), "--", PY, "-c", child],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline() == b"line 0\n"
        proc.stdout.close()  # the reader leaves, as head -1 does
        go.touch()
        err = proc.stderr.read()
        assert proc.wait(WAIT) == 4, err.decode()
    finally:
        proc.kill()
    lines = log.read_text().splitlines()
    assert lines[:20001] == [f"line {i}" for i in range(20001)] and lines[20001] == TRITON
    assert b"1012" in err and b"Traceback" not in err


def test_sighup_is_forwarded_and_the_output_still_read(tmp_path):
    child = (
        "import signal, sys, time\n"
        "def hup(*a): print('child got SIGHUP', flush=True); sys.exit(5)\n"
        "signal.signal(signal.SIGHUP, hup)\nprint('ready', flush=True)\ntime.sleep(300)\n"
    )
    proc = subprocess.Popen([*ERRMAP, "run", "--", PY, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        proc.kill()
    assert proc.returncode == 5 and out == b"child got SIGHUP\n", err.decode()


def test_errmap_stops_when_the_command_exits_despite_what_it_left_running():
    script = "echo $$; sleep 300 & echo done"
    proc = subprocess.Popen([*ERRMAP, "run", "--", "bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=WAIT)  # before the fix: the full 300 s
    finally:
        proc.kill()
        try:
            os.killpg(int(out.split()[0]), signal.SIGKILL)  # the sleep, in the command's process group
        except (ProcessLookupError, ValueError, IndexError, UnboundLocalError):
            pass
    assert proc.returncode == 0 and out.endswith(b"done\n"), err.decode()


def test_a_partial_stdout_line_does_not_glue_onto_a_stderr_error(tmp_path):
    log = tmp_path / "train.log"
    child = (
        "import sys, time\n"
        "sys.stdout.write('epoch 1: 50%'); sys.stdout.flush(); time.sleep(0.3)\n"
        f"print({TRITON!r}, file=sys.stderr, flush=True); time.sleep(0.3)\n"
        "print(' done', flush=True); sys.exit(1)\n"
    )
    proc = subprocess.run([*ERRMAP, "run", "--log", str(log), "--", PY, "-c", child], capture_output=True, cwd=ROOT, timeout=WAIT)
    assert proc.returncode == 1 and proc.stdout == b"epoch 1: 50% done\n"
    assert log.read_text().splitlines() == [TRITON, "epoch 1: 50% done"]
    assert b"1012" in proc.stderr and b"train.log:1" in proc.stderr


def test_two_interrupts_end_a_command_that_ignores_them():
    child = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(300)\n"
    proc = subprocess.Popen([*ERRMAP, "run", "--", PY, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGINT)
        notice = b""
        while b"again" not in notice:  # errmap has handled the first one
            line = proc.stderr.readline()
            assert line, "errmap ended before the second Ctrl-C"
            notice += line
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, err.decode()


def test_a_command_killed_by_sigkill_is_never_no_error(tmp_path):
    proc = subprocess.run([*ERRMAP, "run", "--", "bash", "-c", "echo hi; kill -9 $$"], capture_output=True, cwd=ROOT, timeout=WAIT)
    assert proc.returncode == 137 and proc.stdout == b"hi\n"
    err = " ".join(proc.stderr.decode().split())  # the report is wrapped at the width
    assert "No error found" not in err
    assert "failed with status 137 (killed by SIGKILL); no known cause in its output" in err
    assert "Likely cause: 1021" in err


def test_a_failed_command_with_no_known_cause(tmp_path):
    child = "import sys; print('ZorgError: the flux capacitor broke', file=sys.stderr); sys.exit(3)"
    proc = subprocess.run([*ERRMAP, "run", "--", PY, "-c", child], capture_output=True, cwd=ROOT, timeout=WAIT)
    err = proc.stderr.decode()
    assert proc.returncode == 3 and "No error found" not in err
    assert "failed with status 3; no known cause in its output" in err and "ZorgError" in err.split("summary")[1]
    assert "1021" not in err


def test_run_report_file_holds_json_and_stderr_keeps_text(tmp_path):
    report = tmp_path / "report.json"
    child = f"import sys; print({TRITON!r}, file=sys.stderr); sys.exit(1)"
    proc = subprocess.run([*ERRMAP, "run", "--format", "json", "--report", str(report), "--", PY, "-c", child],
                          capture_output=True, cwd=ROOT, timeout=WAIT)
    import json

    doc = json.loads(report.read_text())
    assert proc.returncode == 1 and doc["diagnoses"][0]["errno"] == 1012 and doc["command"]["status"] == 1
    assert proc.stderr.startswith(TRITON.encode()) and b"errmap summary" in proc.stderr and b'"diagnoses"' not in proc.stderr
