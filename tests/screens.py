"""`errmap scan` of many logs, each on a screen of its own: real pseudo-terminals of a given size.

A few driver processes each hold a pty's slave as stdin, stdout and stderr and run errmap's command
line in-process once per log (one interpreter, so hundreds of scans take seconds, not minutes); after
each scan the driver writes a marker, so the bytes read from the master split into one screen a log.
errmap sizes itself from the terminal as it does for a user (COLUMNS unset: the window size decides).
Each scan also writes its JSON report (`--report`), to compare the screen with what was diagnosed.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
MARK = "\x1e<errmap screen done>"  # a record separator no report prints

_DRIVER = f"""
import sys
from errmap.commands.cli import main
for report, path in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        main.main(args=["scan", "--report", report, path], prog_name="errmap", standalone_mode=False)
    except SystemExit:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    print({MARK!r}, flush=True)
"""


def _start(args: list[str], cols: int, rows: int, cwd: Path, env: dict) -> tuple[subprocess.Popen, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                            env={**base, "TERM": "xterm-256color", **env}, start_new_session=True)
    os.close(slave)
    return proc, master


def screens(paths: list[str], cols: int, rows: int, cwd: Path, env: dict, reports: Path, drivers: int = 2,
            timeout: float = 300) -> dict[str, list[str]]:
    """Each path's scan as the lines a terminal of `cols` x `rows` received (escapes removed); its JSON
    report is `reports`/<the path's index in `paths`>.json."""
    chunks = [paths[i::drivers] for i in range(drivers)]
    started = {master: (proc, chunk) for proc, master, chunk in
               ((*_start([a for path in chunk for a in (str(reports / f"{paths.index(path)}.json"), path)], cols, rows, cwd, env),
                 chunk) for chunk in chunks if chunk)}
    seen = {master: b"" for master in started}
    open_ = set(started)
    deadline = time.monotonic() + timeout
    try:
        while open_:
            if time.monotonic() > deadline:
                raise AssertionError(f"errmap hung on a terminal; it printed {[seen[m][-2000:] for m in open_]!r}")
            ready, _, _ = select.select(list(open_), [], [], 0.5)
            for master in ready:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: the driver exited and the terminal has nothing left to read
                    data = b""
                if data:
                    seen[master] += data
                else:
                    open_.discard(master)
    finally:
        for master, (proc, _) in started.items():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            os.close(master)
    out: dict[str, list[str]] = {}
    for master, (proc, chunk) in started.items():
        text = ESCAPES.sub("", seen[master].decode("utf-8")).replace("\r\n", "\n")
        parts = text.split(MARK + "\n")
        assert len(parts) == len(chunk) + 1, f"a driver stopped early: {text[-2000:]}"
        for path, part in zip(chunk, parts):
            out[path] = part.split("\n")[:-1]
    return out
