"""Lines: ANSI stripping and the prefixes that launchers put before each line.

Only candidate lines (those the prefilter picked) are decoded and peeled, so this stays off the
hot path. Peeling turns `(WorkerDict pid=123, ip=10.0.0.1) [rank3]:[E1202 10:00:00.1 7 x.cpp:9] msg`
into `msg` plus the fields a diagnosis reports: actor, pid, host, rank, level.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and two-byte escapes.
ANSI = regex.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

_PREFIXES = [
    # Ray: "(WorkerDict pid=123, ip=10.0.0.1)", "(pid=123)", "(raylet)", "(TaskRunner pid=9, ip=h, actor_id=..)"
    regex.compile(
        r"\((?P<actor>[A-Za-z_][\w.:-]*)?(?:(?(actor) |)pid=(?P<pid>\d+))?(?:, ip=(?P<host>[^,)\s]+))?(?:, [^)]*)?\)\s*"
    ),
    # torchrun / torch.distributed: "[rank3]:", "[Rank 3]:", "[default3]:"
    regex.compile(r"\[(?:rank|Rank |default)(?P<rank>\d+)\]:\s*"),
    # glog, as printed by c10: "[E1202 10:00:00.123456 1234 ProcessGroupNCCL.cpp:616] "
    # (torch 2.x prints no thread id: "[W1202 11:13:41.396213183 ProcessGroupNCCL.cpp:1575] ")
    regex.compile(r"\[(?P<level>[IWEF])(?P<time>\d{4} \d\d:\d\d:\d\d\.\d+)(?: +\d+)? [^\]\s]+\]\s*"),
    # ISO timestamps, optionally bracketed: "2024-05-09 17:35:49,123 ", "[2024-05-09T17:35:49Z] "
    regex.compile(r"\[?(?P<time>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?[ |:-]*"),
    # logging levels, vLLM style "ERROR 05-09 17:35:49 [engine.py:160] " (before 0.8 without the
    # "[": "ERROR 12-02 08:41:31 engine.py:135] ") and "WARNING:root:"
    regex.compile(
        r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?: (?P<time>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?))?"
        r"(?: \[[^\]]*\]| [\w.-]+:\d+\])?(?::[\w.]*:|:| -| \|)?\s+"
    ),
]
_REPEATED = regex.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")
_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL", "WARN": "WARNING"}
QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING"})


@dataclass(slots=True)
class Line:
    """One line of a log, as a diagnosis cites it."""

    path: str
    lineno: int
    raw: str  # the decoded line, ANSI stripped
    text: str  # raw without launcher prefixes: what anchors run on
    rank: int | None = None
    actor: str | None = None
    pid: int | None = None
    host: str | None = None
    level: str | None = None
    time: str | None = None  # the timestamp as printed
    repeat: int = 1  # Ray's "[repeated 7x across cluster]"
    cut: bool = False  # longer than the line bound; only its start was kept

    @property
    def quiet(self) -> bool:
        """Printed as a DEBUG/INFO/WARNING record: not a failure unless an anchor says so."""
        return self.level in QUIET_LEVELS


def peel(path: str, lineno: int, raw: str, cut: bool = False) -> Line:
    line = Line(path, lineno, raw, raw, cut=cut)
    text = raw
    if (rep := _REPEATED.search(text)) is not None:
        line.repeat = int(rep[1])
        text = text[: rep.start()]
    changed = True
    while changed:
        changed = False
        for pattern in _PREFIXES:
            m = pattern.match(text)
            if m is None or m.end() == 0:
                continue
            groups = m.groupdict()
            if pattern is _PREFIXES[0] and not (groups.get("actor") or groups.get("pid")):
                continue
            for name, value in groups.items():
                if value is None:
                    continue
                if name in ("rank", "pid"):
                    setattr(line, name, int(value))
                elif name == "level":
                    line.level = _LEVELS.get(value, value)
                else:
                    setattr(line, name, value)
            text = text[m.end():]
            changed = True
    line.text = text
    return line
