"""`errmap watch` and `errmap run` over many logs, fast: one process imports errmap once, then forks a child per
command that runs the real command line (`errmap.commands.cli.main`): watch reads the log from a real pipe, run
starts a real `cat` of it. Beside each, the report `errmap scan --format json` gives for the log alone, made here
with the same calls scan makes. Prints one JSON object: log -> {"scan": report, "watch": [live diagnoses],
"run": report}.

    python tests/live_driver.py LOG...
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's errmap, whatever is installed
from errmap.commands import cli  # noqa: E402
from errmap.kb import load  # noqa: E402
from errmap.scan.matcher import Matcher  # noqa: E402
from errmap.scan.parallel import scan  # noqa: E402
from errmap.scan.source import expand  # noqa: E402

IN_FLIGHT = 4  # children at a time


def start(argv: list[str], stdin: int | None, out_fd: int) -> tuple[int, int]:
    """Fork a child that runs `errmap ARGV` with `stdin` as its stdin and writes fd `out_fd` (1 or 2) into a pipe
    that is returned (its other output goes to /dev/null)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.dup2(stdin if stdin is not None else os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(w, out_fd)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 3 - out_fd)
            os.closerange(3, 4096)  # nothing else of the parent's: a pipe's writer held here would never end
            cli.main(argv, prog_name="errmap")
        except SystemExit:
            pass
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


def feeder(data: bytes) -> tuple[int, int]:
    """A child that writes `data` into a pipe and closes it: a real pipe for watch's stdin."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
        os._exit(0)
    os.close(w)
    return pid, r


def main(logs: list[str]) -> dict[str, dict]:
    kb = load.load([])
    matcher = Matcher(kb)
    results: dict[str, dict] = {}
    tasks = []
    for log in logs:
        found = expand([log])
        results[log] = {"scan": scan(matcher, found.sources, found.errors, 1).to_json()}
        tasks += [(log, "watch"), (log, "run")]
    gc.freeze()  # children share the parent's pages instead of copying them when a collection touches them
    sel = selectors.DefaultSelector()
    pending: dict[int, list] = {}  # fd -> [log, command, pid, chunks, feeder pid]

    def launch() -> None:
        log, command = tasks.pop()
        fed = None
        if command == "watch":
            fed, stdin = feeder(open(log, "rb").read())
            pid, fd = start(["watch", "--format", "jsonl"], stdin, 1)
            os.close(stdin)
        else:
            pid, fd = start(["run", "--format", "json", "--", "cat", log], None, 2)
        pending[fd] = [log, command, pid, [], fed]
        sel.register(fd, selectors.EVENT_READ)

    while tasks or pending:
        while tasks and len(pending) < IN_FLIGHT:
            launch()
        for key, _ in sel.select():
            job = pending[key.fd]
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                job[3].append(chunk)
                continue
            sel.unregister(key.fd)
            os.close(key.fd)
            del pending[key.fd]
            log, command, pid, chunks, fed = job
            for p in (pid, fed):
                if p is not None:
                    os.waitpid(p, 0)
            text = b"".join(chunks).decode()
            results[log][command] = [json.loads(x) for x in text.splitlines()] if command == "watch" else json.loads(text)
    return results


if __name__ == "__main__":
    json.dump(main(sys.argv[1:]), sys.stdout)
