"""`errmap run -- CMD`: run a training command, pass its output through untouched, diagnose it live.

On a terminal the command gets a pseudo-terminal, so it keeps its colours and its stdout/stderr
order; otherwise its stdout and stderr stay separate pipes. When errmap's stdin is the terminal,
the pseudo-terminal is also the command's stdin and controlling terminal and errmap relays the
keys, so prompts (`input()`, getpass) work and never stop the command in the background.

Every chunk is forwarded as soon as it is read. The log and the matcher get whole lines: an
unfinished line of one pipe waits for its end, so it never glues onto a line of the other. The
pseudo-terminal does no output processing, so the log holds the bytes the command wrote (LF, not
CRLF). SIGINT, SIGTERM, SIGHUP and SIGQUIT go to the command's process group (held if one comes
while it starts); a second Ctrl-C kills it. errmap stops when the command exits, even when it
leaves background processes holding its output, and a closed reader (`| head`) only stops the
passthrough: the command, the log and the diagnosis go on.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import selectors
import signal
import subprocess
import termios
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from errmap.report.i18n import _
from errmap.scan.matcher import Matcher
from errmap.scan.scanner import Scanner
from errmap.scan.parallel import OnNew, feed
from errmap.scan.source import Source
from errmap.scan.triage import Triage

READ = 1 << 16
HELD = 1 << 20  # an unfinished line is held back from the log up to this size, then written as it is
DRAIN = 1024  # reads, at most, of what is left in the command's outputs once it has exited
QUIET = 0.05  # seconds without output, after the command exited, that end the drain
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@dataclass
class Outcome:
    status: int  # as a shell reports it: 128+N when signal N killed the command
    forced: bool = False  # errmap killed it after a second Ctrl-C
    interrupted: bool = False  # the user pressed Ctrl-C while it ran


def silence(fd: int) -> None:
    """The reader of `fd` is gone (a closed pipe, a hung-up terminal): send the rest to /dev/null."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:  # an inherited non-blocking descriptor: wait until it takes more
            select.select([], [fd], [])
        except OSError:  # EPIPE, EIO: nobody reads it any more; the command and the log go on
            silence(fd)
            return


class _Signals:
    """Forwards signals to the command's process group. Installed before the command starts: a
    signal that comes while it starts is held, then delivered."""

    def __init__(self, notice: Callable[[str], None]):
        self.notice = notice
        self.pgid: int | None = None
        self.held: list[int] = []
        self.interrupts = 0
        self.forced = False

    def __enter__(self) -> _Signals:
        self.previous = {s: signal.signal(s, self._handle) for s in FORWARDED}
        self.previous[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # EPIPE instead
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def started(self, pgid: int) -> None:
        self.pgid = pgid
        held, self.held = self.held, []
        for s in held:
            self.send(s)

    def send(self, signum: int) -> None:
        if self.pgid is None:
            self.held.append(signum)
            return
        try:
            os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def interrupt(self, delivered: bool) -> None:
        """Ctrl-C: the first goes to the command (`delivered`: the pseudo-terminal already did it), a second kills it."""
        self.interrupts += 1
        if self.interrupts == 1:
            if not delivered:
                self.send(signal.SIGINT)
            self.notice(_("Ctrl-C sent to the command; press Ctrl-C again to kill it"))
        elif not self.forced:
            self.forced = True
            self.notice(_("killing the command (SIGKILL)"))
            self.send(signal.SIGKILL)

    def _handle(self, signum: int, _frame) -> None:
        if signum == signal.SIGINT:
            self.interrupt(delivered=False)
        else:
            self.send(signum)


class _Stream:
    """One output of the command: forwarded at once; whole lines go on to the log and the matcher."""

    def __init__(self, fd: int, out: int, recorded: bool, whole_lines: bool):
        self.fd, self.out, self.recorded, self.whole_lines = fd, out, recorded, whole_lines
        self.tail = b""

    def lines(self, data: bytes) -> bytes:
        if not self.whole_lines:
            return data
        buf = self.tail + data
        end = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        if end == 0 and len(buf) < HELD:
            self.tail = buf
            return b""
        if end == 0:
            end = len(buf)
        self.tail = buf[end:]
        return buf[:end]

    def rest(self) -> bytes:
        rest, self.tail = self.tail, b""
        return rest


def _raw_input(fd: int) -> list:
    """Put the terminal in raw input mode (keys go to the command's pseudo-terminal as typed);
    output processing stays on. Returns the settings to restore."""
    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[0] &= ~(termios.BRKINT | termios.ICRNL | termios.INPCK | termios.ISTRIP | termios.IXON)
    mode[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN | termios.ISIG)
    mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSADRAIN, mode)
    return saved


def _copy_size(tty: int, pty_fd: int) -> None:
    try:
        fcntl.ioctl(pty_fd, termios.TIOCSWINSZ, fcntl.ioctl(tty, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        pass


def _foreground(fd: int) -> bool:
    try:
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False


def run_command(
    argv: list[str], matcher: Matcher, triage: Triage, source: Source, on_new: OnNew,
    log: BinaryIO | None = None, notice: Callable[[str], None] = lambda _msg: None,
) -> Outcome:
    """Run argv to completion and return how it ended."""
    use_pty = os.isatty(1)
    keys = _foreground(0)  # errmap owns the terminal: the command reads it through its pseudo-terminal
    # Python children flush each line, so diagnoses follow the output live (an explicit setting wins).
    env = {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1")}
    scanner = Scanner(matcher, source.path)
    last = b"\n"

    def record(data: bytes) -> None:
        nonlocal last
        if not data:
            return
        last = data[-1:]
        if log is not None:
            log.write(data)
            log.flush()
        source.bytes_read += len(data)
        feed(triage, scanner.feed(data), on_new)

    with _Signals(notice) as signals:
        master = slave = screen = None
        saved = None
        streams: list[_Stream] = []
        try:
            if use_pty or keys:
                master, slave = pty.openpty()
                attrs = termios.tcgetattr(0 if keys else slave)
                attrs[1] &= ~termios.OPOST  # the command's bytes as written: no LF -> CRLF
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
                _copy_size(1 if use_pty else 0, slave)
            if keys:
                stdin = slave
            elif os.isatty(0):  # errmap runs in the background: the command must not wait on the terminal
                stdin = subprocess.DEVNULL
            else:
                stdin = None
            out = slave if use_pty else subprocess.PIPE
            proc = subprocess.Popen(
                argv, stdin=stdin, stdout=out, stderr=out, env=env, start_new_session=True,
                preexec_fn=(lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)) if keys else None,
            )
            signals.started(proc.pid)
            if slave is not None:
                os.close(slave)
                slave = None
            if use_pty:
                streams.append(_Stream(master, 1, recorded=True, whole_lines=False))
            else:
                streams += [_Stream(proc.stdout.fileno(), 1, True, True), _Stream(proc.stderr.fileno(), 2, True, True)]
                if master is not None:  # echo of typed keys and what the command writes to /dev/tty
                    screen = os.open(os.ttyname(0), os.O_WRONLY | os.O_NOCTTY)
                    streams.append(_Stream(master, screen, recorded=False, whole_lines=False))
            if keys:
                saved = _raw_input(0)
                signal.signal(signal.SIGWINCH, lambda *_: _copy_size(1 if use_pty else 0, master))
            _pump(proc, streams, master if keys else None, saved, signals, record)
        finally:
            if saved is not None:
                termios.tcsetattr(0, termios.TCSADRAIN, saved)
                signal.signal(signal.SIGWINCH, signal.SIG_DFL)
            for fd in (master, slave, screen):
                if fd is not None:
                    os.close(fd)
        status = proc.wait()
        for stream in streams:
            if stream.recorded:
                record(stream.rest())
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    feed(triage, scanner.finish(), on_new)
    source.lines = scanner.lineno - (1 if last == b"\n" else 0)
    return Outcome(128 - status if status < 0 else status, signals.forced, signals.interrupts > 0)


def _pump(proc: subprocess.Popen, streams: list[_Stream], keys_to: int | None, saved: list | None,
          signals: _Signals, record: Callable[[bytes], None]) -> None:
    """Forward output (and keys) until the command exits, then what it wrote before it went."""
    sel = selectors.DefaultSelector()
    for s in streams:
        sel.register(s.fd, selectors.EVENT_READ, s)
    try:
        exit_fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        exit_fd = None  # no pidfd (not Linux): poll
    if exit_fd is not None:
        sel.register(exit_fd, selectors.EVENT_READ, "exit")
    if keys_to is not None:
        sel.register(0, selectors.EVENT_READ, "keys")
        intr = saved[6][termios.VINTR]  # the terminal's interrupt key, Ctrl-C unless changed
    try:
        while proc.poll() is None:
            for key, _mask in sel.select(None if exit_fd is not None else 0.1):
                if key.data == "exit":
                    continue  # the loop condition sees it
                if key.data == "keys":
                    try:
                        typed = os.read(0, READ)
                    except OSError:
                        typed = b""
                    if not typed:  # the terminal hung up
                        sel.unregister(0)
                        continue
                    _write_all(keys_to, typed)
                    for _hit in range(typed.count(intr)):
                        signals.interrupt(delivered=True)
                    continue
                if not _read(key.data, record):
                    sel.unregister(key.fd)
        # The command has exited: take what it wrote, not what a process it left behind writes on.
        alive = [s for s in streams if s.fd in sel.get_map()]
        for _round in range(DRAIN):
            ready = [key.data for key, _mask in sel.select(QUIET) if isinstance(key.data, _Stream)] if alive else []
            if not ready:
                break
            for s in ready:
                if not _read(s, record):
                    sel.unregister(s.fd)
                    alive.remove(s)
    finally:
        sel.close()
        if exit_fd is not None:
            os.close(exit_fd)


def _read(stream: _Stream, record: Callable[[bytes], None]) -> bool:
    try:
        data = os.read(stream.fd, READ)
    except OSError:  # a pty reports EIO once the command has closed it
        data = b""
    if not data:
        return False
    _write_all(stream.out, data)
    if stream.recorded:
        record(stream.lines(data))
    return True
