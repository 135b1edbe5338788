"""`errmap run -- CMD`: run a training command, pass its output through untouched, diagnose it live.

On a terminal the command gets a pseudo-terminal, so it keeps its colours and its stdout/stderr
order; otherwise its stdout and stderr stay separate pipes. Every chunk is forwarded as soon as it
is read. Ctrl-C (and SIGTERM) go to the command; errmap waits for it and exits with its status.
"""

from __future__ import annotations

import os
import pty
import selectors
import signal
import subprocess
import sys
from typing import BinaryIO

from errmap.matcher import Matcher
from errmap.scan import OnNew, feed
from errmap.source import Source
from errmap.triage import Triage

READ = 1 << 16


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except BrokenPipeError:
            return  # our reader left; keep running the command and diagnosing


def run_command(
    argv: list[str], matcher: Matcher, triage: Triage, source: Source, on_new: OnNew,
    log: BinaryIO | None = None,
) -> int:
    """Run argv to completion; return its exit status (128+N when killed by signal N)."""
    use_pty = sys.stdout.isatty()
    # Python children flush each line, so diagnoses follow the output live (an explicit setting wins).
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
    if use_pty:
        master, slave = pty.openpty()
        proc = subprocess.Popen(argv, stdout=slave, stderr=slave, env=env, preexec_fn=os.setpgrp)
        os.close(slave)
        routes = {master: sys.stdout.fileno()}
    else:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=os.setpgrp)
        routes = {proc.stdout.fileno(): sys.stdout.fileno(), proc.stderr.fileno(): sys.stderr.fileno()}

    def forward(signum, _frame) -> None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    scanner = matcher.scanner(source.path)
    sel = selectors.DefaultSelector()
    for fd in routes:
        sel.register(fd, selectors.EVENT_READ)
    try:
        while routes:
            for key, _ in sel.select():
                fd = key.fd
                try:
                    data = os.read(fd, READ)
                except OSError:  # a pty reports EIO once the command has closed it
                    data = b""
                if not data:
                    sel.unregister(fd)
                    if use_pty:
                        os.close(fd)
                    del routes[fd]
                    continue
                _write_all(routes[fd], data)
                if log is not None:
                    log.write(data)
                    log.flush()
                source.bytes_read += len(data)
                feed(triage, scanner.feed(data), on_new)
        status = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    feed(triage, scanner.finish(), on_new)
    source.lines = scanner.lineno - 1
    return 128 - status if status < 0 else status
