"""Failure shapes: what a failure line looks like when no KB entry knows its message.

The scanner (scanner.py) reads these only on lines that stage one selected by their literals, so they stay off the
hot path. A line of one of these shapes that no anchor explains is an unrecognized failure, so a failed run is never
"No error found"; readings.py then tries the KB again on it (cut, case-folded, the words of a family).

Two strengths:
- strong (GENERIC, GPU_ERROR, an exception named inside a sentence): a failure wherever it is printed, except inside
  DEBUG/INFO/WARNING records, where an exception was most likely handled;
- weak (WEAK, and ERROR/CRITICAL/FATAL records): failure evidence only when nothing else in the run is (a log record
  at ERROR level, a launcher that killed its children); `Triage.unrecognized` drops them beside anything stronger.
"""

from __future__ import annotations

import regex

from errmap.scan.events import Unrecognized
from errmap.scan.lines import Line

# The literals that select the lines the shapes below may match (stage one).
GENERIC_LITERALS = ["Error", "Exception", "KeyboardInterrupt", "terminate called after", "Fatal Python error", "core dumped",
                    "Segmentation fault", "Bus error", "Illegal instruction", "Received signal", ") received by PID",
                    "fatal error:", ": ERROR ", "CUDA error: ", "HIP error: ", "NCCL WARN ",
                    # a lowercased or uppercased paste ("valueerror: ...", "RUNTIMEERROR: ..."), a command line's
                    # "prog: error: ..." (argparse, srun, gcc), C's assert, a shell's report of a killed job
                    "error:", "ERROR:", "EXCEPTION:", "exception:", "Killed", "zsh: ", "segmentation fault",
                    "bus error", "illegal hardware instruction", "floating point exception"]

# The last line of a Python traceback (any exception type, also bare `Exception:`/`Error:` and a lowercased or
# uppercased paste of one; KeyboardInterrupt, a user's Ctrl-C (INTERRUPT), which triage keeps apart from failures),
# PyTorch's "Error(s) in loading state_dict", a C++ terminate, a fatal interpreter error,
# a process killed by a signal (as the shell (zsh in lower case, after "zsh: " or, for a job, "[1]    18472 "), the
# interpreter or torchrun reports it), a compiler's fatal error, a
# tool's "name: ERROR" line, a command line's "prog: error: ..." (argparse's parser.error, srun, gcc), NCCL's report
# of a failed system or CUDA call
# (SYSCHECK/CUDACHECK in its checks.h; other NCCL WARN lines also come at a clean exit, when the proxy service
# thread closes its connections). Matched at the start of a line's text (after its prefixes).
GENERIC = regex.compile(
    r"^(?:(?:[A-Za-z_]\w*\.)*(?P<type>(?:[A-Z]\w*)?(?:Error|Exception))(?:\((?P<inner>[\w.]+)\))?(?::\s?(?P<message>.*))?"
    r"|(?P<type>KeyboardInterrupt)(?::\s?(?P<message>.*))?"
    r"|(?:[a-z_][a-z0-9_]*\.)*(?P<type>[a-z_][a-z0-9_]*(?:error|exception)): ?(?P<message>\S.*)"
    r"|(?:[A-Z_][A-Z0-9_]*\.)*(?P<type>[A-Z_][A-Z0-9_]*(?:ERROR|EXCEPTION)): ?(?P<message>\S.*)"
    r"|(?P<type>Error\(s\)) (?P<message>in .+)"
    r"|(?P<type>terminate) called after throwing an instance of '(?P<message>[^']+)'.*"
    r"|(?P<type>Fatal Python error): (?P<message>.*)"
    r"|(?:\S+: (?:line \d+: +)?\d+ +)?(?P<type>Segmentation fault|Bus error|Illegal instruction|Aborted|Floating point exception|Killed)"
    r"(?P<message>(?: +\(core dumped\))?.*)"
    r"|zsh: (?P<type>segmentation fault|bus error|illegal hardware instruction|killed|abort|floating point exception)"
    r"(?P<message>(?: +\(core dumped\))?.*)"
    r"|(?:\+ +)?\d+ +(?P<type>segmentation fault|bus error|illegal hardware instruction|floating point exception)"
    r"(?P<message>(?: +\(core dumped\))?.*)"
    r"|(?P<type>Signal \d+ \(SIG[A-Z]+\)) received by PID (?P<message>\d+)"
    r"|\*\*\* (?P<type>Received signal \d+) \*\*\*(?P<message>.*)"
    r"|\S+:\d+:(?:\d+:)? (?P<type>fatal error): (?P<message>.*)"
    r"|(?P<type>[a-z][\w-]*): ERROR (?P<message>.+)"
    r"|(?:\S+: )?(?P<type>error): (?P<message>\S.*)"
    r"|(?:\S+:\d+ )?(?P<type>NCCL WARN) (?P<message>(?:Call to \S+ failed ?:|Cuda failure|HIP failure) .+))$"
)
# glibc's assert ("prog: file.c:12: func: Assertion `x' failed.") and a CUDA kernel's ("file.cu:12: kernel: block:
# [0,0,0], thread: [0,0,0] Assertion `x` failed."): read on every line holding "Assertion " (no superset: the unanchored
# gap before the word doubled the cost of GENERIC's superset over a log).
ASSERTION = regex.compile(r"^(?:\S+: )?\S+:\d+: (?:.*?[:\]] )?(?P<type>Assertion) (?P<message>.+? failed)\.?(?P<inner>)$")
# A CUDA/HIP error no anchor knows, wherever it sits (NCCL's watchdog quotes it mid-line).
GPU_ERROR = regex.compile(r"\b(?P<type>CUDA error|HIP error)(?P<inner>): (?P<message>.+)$")
# An exception named after other text: what ends an open traceback behind a prefix nobody listed.
RAISED = regex.compile(r"(?<![\w.])(?:[A-Za-z_]\w*\.)*(?P<type>[A-Z]\w*(?:Error|Exception))(?:\((?P<inner>[\w.]+)\))?: (?P<message>.*)$")
# ... and one quoted in a sentence of another language ("训练时报错 KeyError: 'prompt'"); after English words it is more
# often a handled error quoted in a warning ("falling back because of ImportError: ...").
QUOTED = regex.compile(r"[^\x00-\x7f]\s*(?:[A-Za-z_]\w*\.)*(?P<type>[A-Z]\w*(?:Error|Exception))(?:\((?P<inner>[\w.]+)\))?: (?P<message>.*)$")
CAUGHT = regex.compile(r"Caught (\w+) in ")
# The exception Python raises on Ctrl-C (SIGINT): a run the user stopped, not a failure.
INTERRUPT = "KeyboardInterrupt"
# How a process aborts once it has failed (GENERIC's types): a C++ terminate (its "what():" line follows; PyTorch's NCCL
# watchdog ends a process so, ProcessGroupNCCL.cpp), the interpreter's "Fatal Python error: Aborted" on the SIGABRT
# that follows, the shell's and torchrun's report of that signal. Beside a failure known in the same process, they are
# its consequences (triage), not errors of their own.
ABORTS = frozenset({"terminate", "Aborted", "abort", "Signal 6 (SIGABRT)", "Received signal 6"})


def aborting(type_: str, message: str) -> bool:
    """Whether an unrecognized failure is a process's abort (ABORTS)."""
    return type_ in ABORTS or type_ == "Fatal Python error" and message.startswith("Aborted")

# Weak shapes: launchers' reports that a child failed or was killed, at whatever level they are logged. DeepSpeed's
# launcher (deepspeed/launcher/launch.py sigkill_handler) logs "Killing subprocess N" at INFO for each rank when one
# failed (or on SIGINT/SIGTERM), then "<cmd> exits with return code = N" at ERROR; a shell's "Killed" after a job's
# command line is GENERIC's.
WEAK_LITERALS = ["Killing subprocess ", "exits with return code = "]
# The literals of the shapes that have no superset and are read on every line holding one: ASSERTION, WEAK, log levels.
UNGATED_LITERALS = ["Assertion ", *WEAK_LITERALS]
WEAK = regex.compile(r"(?P<type>Killing subprocess) (?P<message>\d+)$|(?P<type>exits with return code) = (?P<message>-?[1-9]\d*)$")
# Log records at these levels are failure evidence of the weak kind: a logger's level word, and a C++ glog E/F record
# (c10's "[E1205 10:00:00.123456 77 ProcessGroupNCCL.cpp:616] ", old torch's "[E ProcessGroupNCCL.cpp:737] "). Not a
# Python logger's glog record ("E1202 ... select_algorithm.py:2613] ", inductor's autotuning prints handled failures so)
# nor Ray's C++ "[2025-04-21 10:05:37,313 E 9596 9597] ", which raylets print for much they survive.
LOUD_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL"})
# What stage one reads to find such records: the level words. A glog record is read where stage one selects its line
# for another literal: its level has no literal of four bytes or more, and Hyperscan's scan of a whole log slows by a
# fifth with the 23 short ones it would take; c10d's tag "[c10d]" holds a digit, so a line holding it could not be
# remembered by its shape, and a log that stamps every line with its time (the bench's near-miss-stamped) slowed by a
# tenth with it.
LEVEL_LITERALS = ["ERROR", "CRITICAL", "FATAL"]
# A C++ glog E/F record wherever it sits, behind a prefix peeling does not know ("trainer/0 [1]:[E socket.cpp:610] ").
_CPP_GLOG = regex.compile(r"\[[EF](?:\d{3,4} \d\d:\d\d:\d\d\.\d+(?: +\d+)?)? [^\]\s]+\.(?:cc|cpp|cxx|cu|h|hpp):\d+\]")
_CPP_GLOG_BYTES = regex.compile(_CPP_GLOG.pattern.encode())


def glog_record(raw: bytes) -> bool:
    """Whether a line's bytes hold a C++ glog E/F record (what `loud` reads), cheaply: a line a superset dropped is
    read again for it."""
    return (b"[E" in raw or b"[F" in raw) and _CPP_GLOG_BYTES.search(raw) is not None


def loud(raw: str, level: str | None) -> str | None:
    """The level that makes a record failure evidence: a logger's ERROR, CRITICAL or FATAL (the word is in the line, so
    stage one selects it), or a C++ glog E/F record (glog_record; not a Python logger's, nor a level read from another
    log's letter: those lines reach here only when a superset lets them)."""
    if level in LOUD_LEVELS and level in raw:
        return level
    return "ERROR" if "[" in raw and _CPP_GLOG.search(raw) else None


def unknown(line: Line, generic: bool = True) -> list[Unrecognized]:
    """A failure line no anchor explains, by its shape (failures.py): strong, else weak; none if it has no such shape."""
    g = None
    if generic:
        g = GENERIC.match(line.text)
        if g is None and " error: " in line.text:
            g = GPU_ERROR.search(line.text)
        if g is None and not line.text.isascii():  # an exception named inside a sentence of another language
            g = QUOTED.search(line.text)
    if g is None and not line.quiet and "Assertion " in line.text:
        g = ASSERTION.match(line.text)
    if g is not None:
        message = (g["message"] or "").strip()
        caught = CAUGHT.match(message)  # torch DataLoader: "KeyError: Caught KeyError in DataLoader worker process 0."
        return [Unrecognized(line, g["type"], message, g["inner"] or (caught and caught[1]))]
    if any(lit in line.text for lit in WEAK_LITERALS) and (w := WEAK.search(line.text)) is not None:  # at any level
        return [Unrecognized(line, w["type"], w["message"].strip(), weak=True)]
    if (level := loud(line.raw, line.level)) and line.text.strip():
        return [Unrecognized(line, level, line.text.strip(), weak=True)]
    return []
