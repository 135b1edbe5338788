"""Runs: which of the files given together are logs of one run.

Files given together are separate runs unless they belong together: the files of one folder or glob
given as an argument, the files of one Ray session (`.../session_*/logs/`), and files whose names
differ only in numbers (the ranks or nodes of one job: `train_rank0.log`, `train_rank1.log`).
Of a Ray session's files, the logs of Ray's own processes are told from the job's output.
"""

from __future__ import annotations

import os

import regex

RAY_SESSION = regex.compile(r"^(.*?[/\\]session_[^/\\]+)[/\\]logs[/\\]")
_NUMBERS = regex.compile(r"\d+")
# Logs Ray's own processes write into a session's logs/ (ray/_private/node.py get_log_file_names, the
# PROCESS_TYPE_* names of ray_constants.py; ".1" when a process restarts): raylet, GCS, dashboard and its
# modules (dashboard_JobHead.log), the dashboard and runtime-env agents, the autoscaler's monitor, the log
# monitor, the client server, and the core worker's own log in each driver and worker. The job's output is
# worker-*.out/.err and job-driver-*.log. "dashboard" and "monitor" alone are Ray's only inside a session.
_RAY_OWN = regex.compile(r"(?:raylet|gcs_server|dashboard_\w+|runtime_env_agent|log_monitor|ray_client_server"
                         r"|python-core-(?:driver|worker)-[0-9a-f]+_\d+)(?:\.\d+)?\.(?:out|err|log)")
_RAY_OWN_IN_SESSION = regex.compile(r"(?:dashboard|monitor)(?:\.\d+)?\.(?:out|err|log)")


def run_of(path: str, given: str | None = None) -> str:
    """The run a file belongs to: its Ray session folder, else the folder or glob it was found through
    (`given`), else its own path with the numbers in its name as `N` (see name_runs)."""
    if (m := RAY_SESSION.match(path)) is not None:
        return m[1]
    if given is not None:
        return given
    head, name = os.path.split(path)
    return "\0" + os.path.join(head, _NUMBERS.sub("N", name))


def ray_own(path: str) -> bool:
    """Whether a file is the log of one of Ray's own processes rather than of the job it runs."""
    name = os.path.basename(path)
    return (_RAY_OWN.fullmatch(name) is not None
            or (_RAY_OWN_IN_SESSION.fullmatch(name) is not None and RAY_SESSION.match(path) is not None))


def name_runs(sources: list) -> None:
    """Name each run of files given one by one after the first of its files in sorted order (whatever the
    order they were given in), so a run reads as a path."""
    # A file given beside a folder given with it (a driver log next to its `logs/`) is that folder's run.
    beside = {os.path.dirname(os.path.normpath(s.run)): s.run for s in sources if s.run and not s.run.startswith("\0")}
    for s in sources:
        if s.run.startswith("\0") and os.path.dirname(s.path) in beside:
            s.run = beside[os.path.dirname(s.path)]
    first: dict[str, str] = {}
    for s in sources:
        if s.run.startswith("\0"):
            first[s.run] = min(first.get(s.run, s.path), s.path)
    for s in sources:
        s.run = first.get(s.run, s.run)
