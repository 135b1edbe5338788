"""Lines: ANSI stripping and the prefixes that launchers put before each line.

Only candidate lines (those the prefilter picked) are decoded and peeled, so this stays off the
hot path. Peeling records what a prefix says: `(WorkerDict pid=123, ip=10.0.0.1) [rank3]:[E1202
10:00:00.1 7 x.cpp:9] msg` gives actor, pid, host, rank, level and time. It never gates matching:
anchors find a message wherever it starts (kb.MESSAGE_START), after prefixes peeling does not know.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

# Terminal control sequences (ECMA-48), as bytes of a UTF-8 log: CSI (colours, cursor moves; ESC [
# or C1 U+009B), control strings (OSC titles and links, DCS, SOS, PM, APC; ESC ] P X ^ _ or their C1
# forms) up to BEL or ST (or the line's end), every other escape (ESC c resets the terminal, ESC ( 0
# switches its character set), a lone ESC, and the other C1 controls (U+0080-U+009F). No sequence spans a line
# break, so lines joined with newlines are stripped in one call.
_SEQUENCES = (
    r"(?:\x1b\[|{c1}\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[]PX^_]|{c1}[\x90\x98\x9d-\x9f])[^\n]*?(?:\x07|\x1b\\|{c1}\x9c|$)"
    r"|\x1b[ -/]*[0-~]?"
    r"|{c1}[\x80-\x9f]"
)
ANSI = regex.compile(_SEQUENCES.format(c1=r"\xc2").encode(), regex.MULTILINE)
_ANSI_TEXT = regex.compile(_SEQUENCES.format(c1=""), regex.MULTILINE)
# What stays of a control character after its sequences are gone: C0 but tab and newline, DEL, C1.
_CONTROL = regex.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text safe to print on a terminal: no escape sequence or control character (but tab and newline)."""
    return _CONTROL.sub("", _ANSI_TEXT.sub("", text))


# Each alternative is one kind of prefix; the whole group repeats, so one match call peels
# "(WorkerDict pid=1, ip=h) [rank3]:[E1202 10:00:00.1 7 x.cpp:9] " in one go (regex keeps every
# repetition's captures).
PREFIX = regex.compile(
    r"(?:"
    # Ray: "(WorkerDict pid=123, ip=10.0.0.1)", "(pid=123)", "(raylet)", "(TaskRunner pid=9, ip=h, actor_id=..)",
    # always followed by a space (C's "(int)m" is no prefix)
    r"\((?:(?P<actor>[A-Za-z_][\w.:-]*)(?: pid=(?P<pid>\d+))?|pid=(?P<pid>\d+))(?:, ip=(?P<host>[^,)\s]+))?(?:, [^)]*)?\)(?:\s+|$)"
    # torchrun / torch.distributed: "[rank3]:", "[Rank 3]:", "[default3]:"
    r"|\[(?:rank|Rank |default)(?P<rank>\d+)\]:\s*"
    # glog, as printed by c10: "[E1202 10:00:00.123456 1234 ProcessGroupNCCL.cpp:616] " (torch 2.x
    # prints no thread id, torch.distributed's Python logger no bracket: "W1202 11:18:34.86 26072 x.py:874] ")
    # Months before October print three digits ("[E314 14:33:45.17 ...]"); old torch no time ("[E ProcessGroupNCCL.cpp:737] ").
    r"|\[?(?P<glevel>[IWEF])(?P<time>\d{3,4} \d\d:\d\d:\d\d\.\d+)(?: +\d+)? [^\]\s]+\]\s*"
    r"|\[(?P<glevel>[IWEF]) [\w.]+:\d+\]\s*"
    # NCCL: "host:pid:tid [dev] " (the "NCCL WARN ..." after it stays: anchors read it)
    r"|(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[\d+\] "
    # Ray's C++ logs: "[2023-04-09 07:23:59,445 E 395 395] " (then "(raylet) node_manager.cc:1: ...")
    r"|\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) (?P<glevel>[IWEF]) \d+ \d+\]\s*"
    # Kubernetes' CRI log files (/var/log/pods, /var/log/containers): "2016-10-06T00:17:09.669794202Z stdout F "
    # (time, stream, tag P for a partial line or F; kubelet's parseCRILog in pkg/kubelet/kuberuntime/logs/logs.go)
    r"|(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) std(?:out|err) [FP](?::[\w:]+)? "
    # ISO timestamps, optionally bracketed: "2024-05-09 17:35:49,123 ", "[2024-05-09T17:35:49Z] ",
    # SGLang's "[2025-03-01 10:00:00 TP0] " (parallel ranks after the time), Ray's Python logger's tab
    # ("2026-12-04 01:28:50,236\tWARNING http_server_agent.py:79 -- ", ray_constants.LOGGER_FORMAT)
    r"|\[?(?P<time>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)(?: [A-Z]{2}\d+)*\]?[ \t|:-]*"
    # Python loggers' "%(asctime)s - %(levelname)s - %(name)s - " (transformers' and accelerate's example scripts, with
    # datefmt "%m/%d/%Y %H:%M:%S": "12/04/2026 05:00:00 - INFO - __main__ - "), its "%(name)s - %(levelname)s - " order,
    # and LLaMA-Factory's "[%(levelname)s|%(asctime)s] %(name)s:%(lineno)s >> " (llamafactory/extras/logging.py)
    r"|(?P<time>\d\d/\d\d/\d{4} \d\d:\d\d:\d\d(?:[.,]\d+)?) - "
    r"|(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - [\w.<>-]+ - "
    r"|[\w.<>-]+ - (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
    r"|\[(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\|(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?)\] [\w.<>-]+:\d+ >> "
    # logging levels, vLLM style "ERROR 05-09 17:35:49 [engine.py:160] " (before 0.8 without the
    # "[": "ERROR 12-02 08:41:31 engine.py:135] ") and Python logging's BASIC_FORMAT "WARNING:root:" (no space after it)
    # (a job runner's "stdout/INFO  ")
    r"|(?:std(?:out|err)/)?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?: (?P<time>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?))?"
    r"(?: \[[^\]]*\]| [\w.-]+:\d+\]| [\w.-]+:\d+ --)?(?::[\w.]+:\s*|(?::| -| \|)?\s+)"
    # a pasted log's line-number gutter: "1831 | ", "[1831] ", "L1831: " (an editor's, a CI viewer's or a pager's)
    r"|\d{1,7} +\| |\[\d{1,7}\] |L\d{1,7}: "
    # a Markdown quote ("> ", nested "> > ") and a CI viewer's bare gutter ("  | ") before every line of a paste
    r"|(?:> ?)+|\s*\| "
    # docker compose "svc-1  | ", kubectl --prefix "[pod/trainer-0/main] ", slurm srun -l "3: "
    r"|(?P<host>[\w.-]+) +\| "
    r"|\[?pod/(?P<host>[^/\]\s]+)(?:/[^\]\s]+)?\]? "
    r"|(?P<rank>\d{1,5}): "
    # journald / syslog: "Dec 02 10:00:01 node1 python[123]: "
    r"|(?P<time>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>[\w.-]+) (?P<actor>[\w.@/-]+)\[(?P<pid>\d+)\]: "
    # torch.compile's compile id: "[0/0] ", "[3/1_1] " (torch._logging)
    r"|\[\d+/\d+(?:_\d+)?\]\s*"
    # a time of day, bracketed: "[16:10:33] ", SGLang's "[12-16 14:27:10] ", "[12-16 14:27:10 TP0] "
    r"|\[(?P<time>(?:\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?)(?: [A-Z]{2}\d+)*\]\s*"
    r")*"
)
# SGR colour codes whose ESC byte was lost in a paste: "[33m", "[1;31m", "[0m".
_LOST_SGR = regex.compile(r"\[(?:\d{1,3}(?:;\d{1,3})*)?m(?!\])")
# A traceback's quoted source line, `raise ValueError("No available memory ... "`, reads as the message it raises.
_RAISE = regex.compile(r"""raise (?P<type>[\w.]+)\(\s*[fbr]?(?P<q>["'])(?P<message>.*?)(?:(?P=q)\s*\)?)?\s*$""")
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
    quoted: bool = False  # a traceback's quoted `raise X("...")` source line, read as its message

    @property
    def quiet(self) -> bool:
        """Printed as a DEBUG/INFO/WARNING record: an unknown exception there was likely handled."""
        return self.level in QUIET_LEVELS

    @property
    def frame(self) -> bool:
        """A traceback's frame line: evidence of where a failure happened, not of what it was."""
        return self.text.startswith('File "')


def peel(path: str, lineno: int, raw: str, cut: bool = False) -> Line:
    line = Line(path, lineno, raw, raw, cut=cut)
    text = raw
    if "[repeated" in text and (rep := _REPEATED.search(text)) is not None:
        line.repeat = int(rep[1])
        text = text[: rep.start()]
    if "m" in text and "[" in text:
        text = _LOST_SGR.sub("", text)
    m = PREFIX.match(text)
    if m.end():
        caps = m.capturesdict()
        last = {k: v[-1] for k, v in caps.items() if v}
        if "rank" in last:
            line.rank = int(last["rank"])
        if "pid" in last:
            line.pid = int(last["pid"])
        line.actor = last.get("actor")
        line.host = last.get("host")
        line.time = last.get("time")
        levels = [(m.starts(g)[-1], caps[g][-1]) for g in ("level", "glevel") if caps[g]]
        if levels:  # the innermost (last) level printed wins
            level = max(levels)[1]
            line.level = _LEVELS.get(level, level)
        text = text[m.end():]
    # Indented lines (torchrun's failure summary, pip's build output) match as if unindented.
    text = text.lstrip()
    if text.startswith("raise ") and (r := _RAISE.match(text)) is not None:
        text = f"{r['type']}: {r['message']}"
        line.quoted = True
    line.text = text
    return line
