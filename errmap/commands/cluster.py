"""Scanning a Ray cluster where its logs lie.

One task pinned to each alive node (hard node affinity) scans that node's own session logs, found
through its runtime context, plus the user's --node-path globs, with the same matcher and triage as
a local scan. Only the node's incidents and residue travel back (evidence lines and counts, never
the logs); the driver merges them into one triage, so one run is ranked root cause first across
nodes. A node that dies or does not answer within --node-timeout is named; the others still count.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import regex

from errmap.kb.model import KB
from errmap.scan.lines import Line
from errmap.scan.events import Event
from errmap.scan.matcher import Matcher
from errmap.report.contract import Report
from errmap.scan.parallel import scan_source
from errmap.scan.source import InputError, Source, expand
from errmap.scan.triage import MAX_EVIDENCE, Incident, Residue, Triage


class ClusterError(Exception):
    """Ray is missing or no cluster can be reached: a message for the user, not a traceback."""


_RELATIVE = regex.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_STAMP = regex.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'2h', '30m', '1d' ago, or a local time '2026-12-03 10:00[:00]' / ISO 8601."""
    now = now or datetime.now()
    if m := _RELATIVE.fullmatch(text.strip()):
        return now - timedelta(**{_UNITS[m[2]]: float(m[1])})
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=None)
    except ValueError:
        raise ValueError(f"--since {text!r}: give a time such as '2026-12-03 10:00' or an age such as 2h, 30m, 1d") from None


def _line_time(line: Line) -> datetime | None:
    """A line's own timestamp when it carries a full date (glog's '1202 10:00' has no year)."""
    if line.time and (m := _STAMP.match(line.time)):
        try:
            return datetime(*(int(x) for x in m.groups()))
        except ValueError:
            return None
    return None


@dataclass
class _SinceTriage(Triage):
    """A triage that drops events whose line is dated before `since`."""

    since: datetime | None = None

    def add(self, event: Event) -> Incident | Residue | None:
        when = _line_time(event.line) if self.since else None
        if when is not None and when < self.since:
            return None
        return super().add(event)


# ---------------------------------------------------------------- on each node


def scan_here(kb: KB, node_paths: list[str], since: float | None) -> dict[str, Any]:
    """Scan this node's Ray session logs and `node_paths`; return the compact triage (runs on the node)."""
    import ray

    start = time.perf_counter()
    ctx = ray.get_runtime_context()
    logs = Path(ctx.get_temp_dir()) / ctx.get_session_name() / "logs"
    found = expand([str(logs), *node_paths])
    cutoff = datetime.fromtimestamp(since) if since is not None else None
    sources = []
    for s in found.sources:
        try:
            if since is not None and os.path.getmtime(s.path) < since:
                continue  # not written since then: no line of it can be newer
        except OSError:
            pass  # scan_source records why it cannot be read
        sources.append(s)
    triage = _SinceTriage(since=cutoff)
    matcher = Matcher(kb)
    for s in sources:
        scan_source(matcher, s, triage)
    return {
        "node_id": ctx.get_node_id(),
        "logs": str(logs),
        "sources": [(s.path, s.bytes_read, s.lines, s.warning, s.error) for s in sources],
        "errors": [(e.path, e.reason) for e in found.errors],
        "incidents": [
            (i.entry.errno, i.fingerprint, i.captures, i.order, i.evidence, i.count, i.last, i.ranks, i.hosts, i.files, i.words)
            for i in triage.incidents.values()
        ],
        "residue": [(k, r.type, r.message, r.first, r.order, r.inner, r.count, r.weak) for k, r in triage.residue.items()],
        "seconds": round(time.perf_counter() - start, 2),
    }


# ---------------------------------------------------------------- on the driver


@dataclass
class NodeResult:
    node_id: str
    ip: str
    label: str  # how evidence names the node: its IP, with the node id when IPs repeat
    status: str = "ok"  # ok, died, timeout, failed
    reason: str = ""
    logs: str = ""
    files: int = 0
    lines: int = 0
    payload_bytes: int = 0  # what the node sent back, pickled
    scan_s: float | None = None  # how long the node's scan took, on the node
    diagnoses: int = 0
    unrecognized: int = 0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", None)}


@dataclass
class ClusterScan:
    report: Report
    nodes: list[NodeResult] = field(default_factory=list)


def _connect(address: str | None):
    try:
        import ray
    except ImportError:
        raise ClusterError("--ray needs Ray in this Python: pip install 'errmap[ray]'") from None
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and "://" not in address:
        try:  # Ray itself retries an absent GCS for minutes
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            raise ClusterError(f"no Ray cluster reachable at {address!r}: {exc.strerror or exc}"
                               " (start one with `ray start --head`, or give --ray=ADDRESS / RAY_ADDRESS)") from None
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False,
                 runtime_env={"py_modules": [str(Path(__file__).resolve().parent.parent)]})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"no Ray cluster reachable at {address!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                           " (start one with `ray start --head`, or give --ray=ADDRESS / RAY_ADDRESS)") from None
    return ray


def scan_cluster(kb: KB, address: str | None = None, node_paths: list[str] | None = None,
                 since: datetime | None = None, node_timeout: float = 60.0) -> ClusterScan:
    """Scan every alive node of the cluster at `address` and merge what they found into one report."""
    with contextlib.redirect_stdout(sys.stderr):  # Ray prints its cluster events ("node ... marked dead") to stdout
        return _scan(kb, address, node_paths, since, node_timeout)


def _scan(kb: KB, address: str | None, node_paths: list[str] | None, since: datetime | None,
          node_timeout: float) -> ClusterScan:
    ray = _connect(address)
    import pickle

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        ips = [n["NodeManagerAddress"] for n in alive]
        nodes = [NodeResult(n["NodeID"], n["NodeManagerAddress"],
                            n["NodeManagerAddress"] if ips.count(n["NodeManagerAddress"]) == 1
                            else f"{n['NodeManagerAddress']}#{n['NodeID'][:8]}") for n in alive]
        task = ray.remote(num_cpus=0, max_retries=0)(scan_here)
        kb_ref = ray.put(kb)
        stamp = since.timestamp() if since else None
        refs = {
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)).remote(
                kb_ref, list(node_paths or []), stamp): n
            for n in nodes
        }
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=node_timeout)
        results: dict[str, dict] = {}
        for ref in ready:
            node = refs[ref]
            try:
                results[node.node_id] = ray.get(ref)
            except ray.exceptions.RayError as exc:
                node.status = "died" if isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
                                                        ray.exceptions.TaskUnschedulableError)) else "failed"
                node.reason = _short(exc)
        for ref in pending:
            node = refs[ref]
            node.status, node.reason = "timeout", f"no answer within {node_timeout:g}s"
            ray.cancel(ref, force=True)
        payload = {nid: len(pickle.dumps(r)) for nid, r in results.items()}
    finally:
        ray.shutdown()
    return _merge(kb, nodes, results, payload)


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    for needle in ("ModuleNotFoundError", "ImportError"):
        if needle in text:
            line = next(ln for ln in text.splitlines() if needle in ln)
            return (f"{line.strip()}: errmap's dependencies are missing on that node; install errmap there "
                    "(pip install errmap) or use a cluster image that has it")
    return text.splitlines()[-1][:300] if text else type(exc).__name__


def _merge(kb: KB, nodes: list[NodeResult], results: dict[str, dict], payload: dict[str, int]) -> ClusterScan:
    triage = Triage()
    sources: list[Source] = []
    errors: list[InputError] = []
    for node in nodes:
        if node.node_id not in results:
            errors.append(InputError(f"node {node.label} ({node.node_id[:12]})", f"{node.status}: {node.reason}"))
            continue
        r = results[node.node_id]
        node.logs, node.payload_bytes, node.scan_s = r["logs"], payload[node.node_id], r["seconds"]
        where = f"{node.label}:"
        for path, nbytes, nlines, warning, error in r["sources"]:
            sources.append(Source(where + path, nbytes, nlines, warning, error))
            if error:
                errors.append(InputError(where + path, error))
        errors += [InputError(where + p, reason) for p, reason in r["errors"]]
        node.files, node.lines = len(r["sources"]), sum(s[2] for s in r["sources"])
        node.diagnoses, node.unrecognized = len(r["incidents"]), len(r["residue"])
        base = triage._events
        for errno, fp, caps, order, evidence, count, last, ranks, hosts, files, words in sorted(r["incidents"], key=lambda i: i[3]):
            entry = kb.entries.get(errno)
            if entry is None:
                continue
            for line in (*evidence, last):
                _place(line, node, where)
            inc = triage.incidents.get(fp)
            if inc is None:
                inc = triage.incidents[fp] = Incident(entry, fp, dict(caps), base + order, words=words)
            else:
                inc.words = inc.words if words is not None else None
                for k, v in caps.items():
                    inc.captures.setdefault(k, v)
            inc.evidence += evidence[: MAX_EVIDENCE - len(inc.evidence)]
            inc.count += count
            inc.last = last
            inc.ranks |= ranks
            inc.hosts |= hosts | {node.label}
            inc.files.update(dict.fromkeys(where + f for f in files))
            triage._events = max(triage._events, base + order)
        for key, type_, message, first, order, inner, count, weak in sorted(r["residue"], key=lambda x: x[4]):
            _place(first, node, where)
            res = triage.residue.get(key)
            if res is None:
                res = triage.residue[key] = Residue(type_, message, first, base + order, inner, weak=weak)
            res.count += count
            triage._events = max(triage._events, base + order)
    return ClusterScan(Report(sources, triage, errors), nodes)


def _place(line: Line | None, node: NodeResult, where: str) -> None:
    """Name the node in a line that came from it (once: evidence and last may be the same object)."""
    if line is None or line.path.startswith(where):
        return
    line.path = where + line.path
    if line.host is None:
        line.host = node.label


def node_lines(nodes: list[NodeResult]) -> list[str]:
    """One line a node, for the text report: what it scanned and found, or why it did not answer."""
    out = []
    for n in nodes:
        head = f"node {n.label} ({n.node_id[:12]})"
        if n.status != "ok":
            out.append(f"{head}: {n.status}, {n.reason}")
        elif n.diagnoses or n.unrecognized:
            found = ", ".join(x for x in (n.diagnoses and f"{n.diagnoses} diagnos{'is' if n.diagnoses == 1 else 'es'}",
                                          n.unrecognized and f"{n.unrecognized} unrecognized") if x)
            out.append(f"{head}: {found} in {n.files} files, {n.lines:,} lines")
        else:
            out.append(f"{head}: no errors ({n.files} files, {n.lines:,} lines)")
    return out

