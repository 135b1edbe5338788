"""`errmap run -- CMD`: run a training command, pass its output through untouched, diagnose it live.

On a terminal the command gets a pseudo-terminal of its own (its controlling terminal, in a session of
its own), so it keeps its colours and its stdout/stderr order, and what the user types reaches it (a
wandb or Hugging Face login prompt never hangs); otherwise its stdout and stderr stay separate pipes.
Every chunk is forwarded as soon as it is read and the log gets exactly the bytes the command wrote
(the pseudo-terminal adds no CR). Ctrl-C (and SIGTERM) go to the command; errmap waits for it and exits
with its status. A reader that leaves (`| head`) stops the forwarding, never the command or the log.
"""

from __future__ import annotations

import fcntl
import os
import pty
import selectors
import signal
import subprocess
import sys
import termios
from typing import BinaryIO

from errmap.matcher import Matcher
from errmap.scan import OnNew, feed
from errmap.source import Source
from errmap.triage import Triage

READ = 1 << 16
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _write_all(fd: int, data: bytes) -> bool:
    """Write everything; False once the reader has gone (EPIPE)."""
    while data:
        try:
            data = data[os.write(fd, data):]
        except BrokenPipeError:
            return False
    return True


def _pty_for_child() -> tuple[int, int]:
    """A pseudo-terminal sized like ours, with no output processing (no CR before LF) and no echo of the
    input we forward (the user's own terminal echoes it already)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    try:
        size = fcntl.ioctl(sys.stdout.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    except OSError:
        pass
    return master, slave


def _controlling_tty() -> None:
    """In the child, after setsid: its stdin, the pseudo-terminal, becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def run_command(
    argv: list[str], matcher: Matcher, triage: Triage, source: Source, on_new: OnNew,
    log: BinaryIO | None = None,
) -> int:
    """Run argv to completion; return its exit status (128+N when killed by signal N)."""
    use_pty = sys.stdout.isatty()
    # Python children flush each line, so diagnoses follow the output live (an explicit setting wins).
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
    # Without a pty but with a terminal on stdin, the command stays in our (foreground) process group so that it
    # may read the terminal; the terminal then sends Ctrl-C to both of us, and only other signals are forwarded.
    shared_group = not use_pty and os.isatty(0)
    proc: subprocess.Popen | None = None
    pending: list[int] = []

    def forward(signum, _frame) -> None:
        if proc is None:
            pending.append(signum)  # arrived while the command was being started
        elif not (shared_group and signum == signal.SIGINT):
            try:
                os.kill(proc.pid, signum) if shared_group else os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass

    # Handlers first, so that no signal between start and install is lost; SIGPIPE ignored so that a reader
    # that leaves shows as EPIPE on our write instead of killing errmap (the child gets the default back).
    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    previous[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    master = None
    try:
        if use_pty:
            master, slave = _pty_for_child()
            try:
                proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                        start_new_session=True, preexec_fn=_controlling_tty)
            finally:
                os.close(slave)
            routes = {master: sys.stdout.fileno()}
        else:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                    preexec_fn=None if shared_group else os.setpgrp)
            routes = {proc.stdout.fileno(): sys.stdout.fileno(), proc.stderr.fileno(): sys.stderr.fileno()}
        for signum in pending:
            forward(signum, None)
        status = _pump(proc, routes, master, matcher, triage, source, on_new, log)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if master is not None:
            os.close(master)
    return 128 - status if status < 0 else status


def _pump(proc: subprocess.Popen, routes: dict[int, int], master: int | None, matcher: Matcher, triage: Triage,
          source: Source, on_new: OnNew, log: BinaryIO | None) -> int:
    """Forward, log and diagnose the command's output until it closes; pass our stdin to its terminal."""
    scanner = matcher.scanner(source.path)
    sel = selectors.DefaultSelector()
    for fd in routes:
        sel.register(fd, selectors.EVENT_READ)
    stdin = sys.stdin.fileno() if master is not None and sys.stdin is not None else None
    if stdin is not None:
        try:
            sel.register(stdin, selectors.EVENT_READ)
        except (OSError, ValueError):  # closed, or a file: the command reads nothing from us
            stdin = None
    gone: set[int] = set()  # outputs whose reader left
    while routes:
        for key, _ in sel.select():
            fd = key.fd
            try:
                data = os.read(fd, READ)
            except OSError:  # a pty reports EIO once the command has closed it
                data = b""
            if fd == stdin:
                if not data:  # our input ended: the command's terminal reads end-of-file
                    sel.unregister(fd)
                    stdin = None
                    data = termios.tcgetattr(master)[6][termios.VEOF]
                _write_all(master, data)
                continue
            if not data:
                sel.unregister(fd)
                del routes[fd]
                continue
            out = routes[fd]
            if out not in gone and not _write_all(out, data):
                gone.add(out)
            if log is not None:
                log.write(data)
                log.flush()
            source.bytes_read += len(data)
            feed(triage, scanner.feed(data), on_new)
    status = proc.wait()
    feed(triage, scanner.finish(), on_new)
    source.lines = scanner.lineno - 1
    return status
