"""Scanning a Ray cluster where its logs lie.

The address is checked first, within --connect-timeout: a GCS answers, anything else is named (an
HTTP server, the Ray dashboard, whose cluster's GCS is then used where it can be found). Then one task
pinned to each alive node (hard node affinity) lists that node's own session logs, found through its
runtime context, and the user's --node-path globs, leaving out the logs of errmap's own tasks; a file
that several nodes see (shared storage: the same name, size, modification time, inode and first bytes)
goes to one of them. A second task on each node scans what it was given with the node's cores, with the
same matcher and triage as a local scan. Only the node's incidents and residue travel back (evidence lines
and counts, never the logs); the driver merges them into one triage, ranked by each line's own time
(on the driver's clock, as far as the nodes' answers tell it), so the earliest root cause of the
cluster comes first. A node that dies, does not answer within --node-timeout or answers what cannot be
read is named, as is a node the GCS marked dead lately; the others still count.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import io
import json
import os
import pickle
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import regex

from errmap.kb import files as kbfiles
from errmap.kb.model import KB
from errmap.scan.lines import Line
from errmap.scan.events import Event
from errmap.scan.matcher import Matcher
from errmap.report.contract import Report
from errmap.scan.parallel import scan as scan_sources
from errmap.scan.source import InputError, Source, expand
from errmap.scan.triage import MAX_EVIDENCE, Incident, Residue, Triage


class ClusterError(Exception):
    """Ray is missing or no cluster can be reached: a message for the user, not a traceback."""


_RELATIVE = regex.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_STAMP = regex.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?")
# Ray's header of an error raised in a task or actor, as the driver prints it:
# "ray.exceptions.RayTaskError(OutOfMemoryError): ray::Worker.run() (pid=77, ip=10.0.0.5, actor_id=...)"
# (RayTaskError.__str__ in ray/exceptions.py): the failure happened on the node at ip.
_TASK_HEADER = regex.compile(r"RayTaskError\((?P<inner>[\w.]+)\)[^\n]*?\(pid=\d+, ip=(?P<ip>[^,)\s]+)")
_HEADER_REACH = 200  # lines from such a header to the error it wraps (the task's traceback between)
# The log files of a Ray job's processes, named by its job id (hex): its driver's core-worker log, each
# worker's stdout and stderr, its runtime-env setup (Ray's worker and driver log file names).
_JOB_LOG = regex.compile(r"(?:python-core-driver-(?P<job>[0-9a-f]{8})[0-9a-f]*_(?P<pid>\d+)\.log"
                         r"|worker-(?P<worker>[0-9a-f]+)-(?P<job>[0-9a-f]{8})-(?P<pid>\d+)\.(?:out|err)"
                         r"|runtime_env_setup-(?P<job>[0-9a-f]{8})\.log)")
# ... and a worker's other logs, by its worker id or pid: its core-worker log, its event files (event_CORE_WORKER_<pid>,
# event_EXPORT_TASK_<pid>)
_PROCESS_LOG = regex.compile(r"python-core-worker-(?P<worker>[0-9a-f]+)_(?P<pid>\d+)\.log|event_[A-Z_]+?_(?P<pid>\d+)\.log")
HEAD_BYTES = 64 << 10  # bytes of a file's start that tell shared copies of it apart
RECENT = timedelta(hours=24)  # dead nodes reported without --since: those the GCS marked dead this long ago at most
GCS_PORT = 6379  # `ray start --head`'s default GCS port
JOB_TAG = "errmap"  # the key in the job metadata of errmap's own scans (their logs are not scanned)
_EARLIER_SCAN = regex.compile(r"\berrmap\b.* scan\b.* --ray\b")  # the command line of a scan by a version that tagged none


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
    """A line's own timestamp when it carries a full date (glog's '1202 10:00' has no year), as printed."""
    if line.time and (m := _STAMP.match(line.time)):
        try:
            return datetime(*(int(x) for x in m.groups()[:6]))
        except ValueError:
            return None
    return None


def _epoch(line: Line, utc_offset: float) -> float | None:
    """When a line was printed, in seconds since the epoch: in its own zone where it names one, else its node's."""
    when = _line_time(line)
    if when is None:
        return None
    m = _STAMP.match(line.time)
    zone = m[8]
    if zone:
        utc_offset = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[-2:]) * 60)
    return calendar.timegm(when.timetuple()) + float(f"0.{m[7] or 0}") - utc_offset


@dataclass
class _NodeTriage(Triage):
    """A node's triage: it drops events dated before `since`, and notes where Ray's task-error headers are."""

    since: datetime | None = None
    headers: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)  # file -> (line, wrapped type, ip)

    def add(self, event: Event) -> Incident | Residue | None:
        line = getattr(event, "line", None)
        if line is not None and "ip=" in line.raw and (m := _TASK_HEADER.search(line.raw)):
            self.headers.setdefault(line.path, []).append((line.lineno, m["inner"].rsplit(".", 1)[-1], m["ip"]))
        when = _line_time(line) if self.since and line is not None else None
        if when is not None and when < self.since:
            return None
        return super().add(event)

    def forwarded(self, inc: Incident) -> str | None:
        """The IP of the node an incident happened on, where its first line is the error of a Ray task-error
        header above it (the driver's log holds what failed on another node)."""
        first = inc.first
        for lineno, inner, ip in reversed(self.headers.get(first.path, ())):
            if lineno <= first.lineno <= lineno + _HEADER_REACH and inner in first.text:
                return ip
        return None


# ---------------------------------------------------------------- on each node


def _session_logs() -> Path:
    import ray

    ctx = ray.get_runtime_context()
    return Path(ctx.get_temp_dir()) / ctx.get_session_name() / "logs"


def _skipped(paths: list[str], jobs: set[str]) -> set[str]:
    """The log files of errmap's own jobs (by their job ids) among `paths`, with their processes' other logs."""
    out, workers, pids = set(), set(), set()
    for p in paths:
        if (m := _JOB_LOG.fullmatch(os.path.basename(p))) and m["job"] in jobs:
            out.add(p)
            workers.add(m["worker"])
            pids.add(m["pid"])
    for p in paths:
        if (m := _PROCESS_LOG.fullmatch(os.path.basename(p))) and (m["worker"] in workers if m["worker"] else m["pid"] in pids):
            out.add(p)
    return out


def _identity(path: str, st: os.stat_result) -> str | None:
    """What one file looks like from any node that sees it on shared storage: its name, size, modification time,
    inode number (a network file system gives every client the server's) and first bytes. Copies of one log on
    two nodes' own disks differ in their inodes, and both are scanned."""
    if st.st_size == 0:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return None
    digest = hashlib.blake2b(head, digest_size=16).hexdigest()
    return f"{os.path.basename(path)}:{st.st_size}:{int(st.st_mtime)}:{st.st_ino}:{digest}"


def list_here(node_paths: list[str], since: float | None, jobs: list[str]) -> dict[str, Any]:
    """This node's Ray session logs and `node_paths`, without errmap's own jobs' logs (runs on the node)."""
    logs = _session_logs()
    found = expand([str(logs), *node_paths])
    own = _skipped([s.path for s in found.sources], set(jobs))
    files = []
    for s in found.sources:
        if s.path in own:
            continue
        try:
            st = os.stat(s.path)
        except OSError:
            files.append((s.path, s.run, 0, None))  # the scan records why it cannot be read
            continue
        if since is not None and st.st_mtime < since:
            continue  # not written since then: no line of it can be newer
        files.append((s.path, s.run, st.st_size, _identity(s.path, st)))
    return {"logs": str(logs), "files": files, "skipped": len(own), "errors": [(e.path, e.reason) for e in found.errors],
            "clock": time.time(), "utc_offset": time.localtime().tm_gmtoff}


def scan_here(kb: KB, files: list[tuple[str, str]], since: float | None) -> dict[str, Any]:
    """Scan these files with this node's cores; return the compact triage (runs on the node)."""
    start = time.perf_counter()
    sources = [Source(path, run=run) for path, run in files]
    triage = _NodeTriage(runs={s.path: s.run for s in sources}, since=datetime.fromtimestamp(since) if since else None)
    scan_sources(Matcher(kb), sources, [], None, triage)
    return {
        "sources": [(s.path, s.bytes_read, s.lines, s.warning, s.error) for s in sources],
        "incidents": [
            (i.entry.errno, i.fingerprint, i.captures, i.order, i.evidence, i.count, i.until, i.ranks, i.hosts,
             i.files, i.words, triage.forwarded(i))
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
    status: str = "ok"  # ok, dead (marked dead before the scan: not scanned), died, timeout, failed
    reason: str = ""
    logs: str = ""
    files: int = 0
    lines: int = 0
    skipped: int = 0  # log files of errmap's own scans, left out
    payload_bytes: int = 0  # what the node sent back, pickled
    scan_s: float | None = None  # how long the node's scan took, on the node
    clock_offset_s: float | None = None  # the node's clock minus the driver's, as its answer arrived
    utc_offset_s: int | None = None  # the node's time zone: the offset of its local time from UTC
    dated: bool | None = None  # whether any line it found carries a date (undated ones rank after the dated)
    diagnoses: int = 0
    unrecognized: int = 0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", None)}


@dataclass
class ClusterScan:
    report: Report
    nodes: list[NodeResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the user should know about the address used


def scan_cluster(kb: KB, address: str | None = None, node_paths: list[str] | None = None,
                 since: datetime | None = None, node_timeout: float = 60.0, connect_timeout: float = 15.0) -> ClusterScan:
    """Scan every alive node of the cluster at `address` and merge what they found into one report."""
    # Ray prints cluster events (a node marked dead, the raylet's last state dump) to stdout from a thread of
    # its own: none of it is errmap's output, and what it says of nodes the report says
    with contextlib.redirect_stdout(io.StringIO()):
        return _scan(kb, address, node_paths or [], since, node_timeout, connect_timeout)


# ---------------------------------------------------------------- the address


def _ray():
    try:
        import ray
    except ImportError:
        raise ClusterError("--ray needs Ray in this Python: pip install 'errmap[ray]'") from None
    return ray


_HINT = " (start one with `ray start --head`, or give --ray=ADDRESS / RAY_ADDRESS)"


def _gcs_version(address: str, timeout: float) -> str | None:
    """The Ray version of the GCS at host:port, or None where what answers is no GCS (or nothing does in time)."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            reply = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).CheckAlive(gcs_service_pb2.CheckAliveRequest(),
                                                                                   timeout=timeout)
        except grpc.RpcError as exc:
            # a GCS that wants a token still says so as a GCS
            return "?" if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) else None
        return reply.ray_version or "?"


def _http(url: str, timeout: float) -> tuple[str | None, Any]:
    """(the Server header, the JSON body or None) of a GET, or (None, None) where no HTTP server answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (an address the user gave)
            server, body = r.headers.get("Server") or "", r.read(1 << 20)
    except urllib.error.HTTPError as exc:
        return exc.headers.get("Server") or "", None
    except (OSError, ValueError):
        return None, None
    try:
        return server, json.loads(body)
    except ValueError:
        return server, None


def _host_port(address: str) -> tuple[str, str]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), port


def _dashboard_gcs(url: str, timeout: float) -> tuple[str | None, str]:
    """For the Ray dashboard at `url`: the GCS address of its cluster (None where none answers) and what was tried.
    The dashboard names its head node's temp dir, where `ray start` wrote the GCS address (read where errmap runs
    on the head); else the head's address with the default GCS port."""
    _, nodes = _http(url.rstrip("/") + "/nodes?view=summary", timeout)
    head = next((n.get("raylet", {}) for n in (((nodes or {}).get("data") or {}).get("summary") or [])
                 if isinstance(n, dict) and n.get("raylet", {}).get("isHeadNode")), {})
    tried = []
    try:
        written = (Path(head["tempDir"]) / "ray_current_cluster").read_text().strip()
        tried.append(written)
    except (KeyError, TypeError, OSError):
        pass
    host = head.get("nodeManagerAddress") or urllib.request.urlparse(url).hostname or ""
    tried.append(f"{host}:{GCS_PORT}")
    for cand in dict.fromkeys(tried):
        if _gcs_version(cand, timeout):
            return cand, cand
    return None, " or ".join(tried)


def _what_answers(address: str, timeout: float) -> str:
    """What is at host:port when it is no GCS: the Ray dashboard, another HTTP server, or a server that says nothing."""
    server, version = _http(f"http://{address}/api/version", timeout)
    if isinstance(version, dict) and "ray_version" in version:
        return f"the Ray dashboard (Ray {version['ray_version']}): the address of the Jobs API and the web UI"
    if server is not None:
        return f"an HTTP server ({server})" if server else "an HTTP server"
    return "a server that answers neither as a Ray GCS nor as an HTTP server"


def resolve(address: str | None, timeout: float) -> tuple[str, list[str]]:
    """The GCS address to connect to, checked within `timeout` seconds, and notes for the user; ClusterError
    where there is none."""
    import socket

    _ray()
    given = address or os.environ.get("RAY_ADDRESS") or "auto"
    named = "--ray" if address else ("RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else "--ray")
    deadline = time.monotonic() + timeout
    left = lambda: max(0.5, deadline - time.monotonic())  # noqa: E731
    if given == "auto":
        from ray._private.utils import read_ray_address

        found = read_ray_address()
        if not found:
            raise ClusterError("no Ray cluster is running on this machine" + _HINT)
        given = found
    if given.startswith(("http://", "https://")):
        server, version = _http(given.rstrip("/") + "/api/version", left())
        if not (isinstance(version, dict) and "ray_version" in version):
            what = f"an HTTP server ({server})" if server else ("an HTTP server" if server is not None else "nothing that answers")
            raise ClusterError(f"{named}={given} is an HTTP address, the form of the Ray dashboard's (the Jobs API's, such as "
                               f"http://head:8265), and {what} is there; --ray needs the cluster's GCS address, "
                               f"such as head:{GCS_PORT}")
        gcs, tried = _dashboard_gcs(given, left())
        if gcs is None:
            raise ClusterError(f"{named}={given} is the Ray dashboard (Ray {version['ray_version']}), the Jobs API's address; "
                               f"--ray needs its cluster's GCS address, and none answers at {tried}: give --ray=HEAD:PORT "
                               "(`ray status` on the head names it)")
        return gcs, [f"{given} is the Ray dashboard, the Jobs API's address; scanning its cluster through the GCS at {gcs}"]
    if "://" in given:
        raise ClusterError(f"{named}={given}: --ray takes the GCS address of the cluster, such as head:{GCS_PORT}")
    host, port = _host_port(given)
    if not port.isdigit():
        raise ClusterError(f"{named}={given}: give the GCS address as HOST:PORT, such as head:{GCS_PORT}")
    try:  # Ray itself retries an absent GCS for minutes
        socket.create_connection((host, int(port)), timeout=left()).close()
    except OSError as exc:
        raise ClusterError(f"no Ray cluster reachable at {given!r}: {exc.strerror or exc}" + _HINT) from None
    if _gcs_version(given, left()) is None:
        if time.monotonic() >= deadline:
            raise ClusterError(f"{given} did not answer as a Ray GCS within {timeout:g}s (--connect-timeout)")
        raise ClusterError(f"{given} is {_what_answers(given, left())}, not a Ray GCS; --ray needs the cluster's GCS address "
                           f"(head:{GCS_PORT} unless `ray start --head --port` chose another)")
    return given, []


def _modules() -> tuple[str, tempfile.TemporaryDirectory | None]:
    """The errmap package as Ray ships it to the nodes, the knowledge base inside it: in a checkout kb/ lies beside
    the package, so a folder of links holds both (Ray follows them)."""
    package = Path(__file__).resolve().parent.parent
    kb_dir = kbfiles.official_dir()
    if kb_dir.parent == package:
        return str(package), None
    staged = tempfile.TemporaryDirectory(prefix="errmap-ray-")
    root = Path(staged.name) / "errmap"
    root.mkdir()
    for child in package.iterdir():
        if child.name != "__pycache__":
            (root / child.name).symlink_to(child)
    (root / "_kb").symlink_to(kb_dir)
    return str(root), staged


def _connect(address: str):
    ray = _ray()
    modules, staged = _modules()
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False,
                 job_config=ray.job_config.JobConfig(metadata={JOB_TAG: "scan"}),
                 runtime_env={"py_modules": [modules], "excludes": ["__pycache__"]})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"no Ray cluster reachable at {address!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                           + _HINT) from None
    finally:
        if staged is not None:
            staged.cleanup()
    return ray


# ---------------------------------------------------------------- the scan


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    for needle in ("ModuleNotFoundError", "ImportError"):
        if needle in text:
            line = next(ln for ln in text.splitlines() if needle in ln)
            return (f"{line.strip()}: errmap's dependencies are missing on that node; install errmap there "
                    "(pip install errmap) or use a cluster image that has it")
    return text.splitlines()[-1][:300] if text else type(exc).__name__


def _on_nodes(ray, nodes: list[NodeResult], task, args: dict[str, tuple], deadline: float,
              late: str) -> dict[str, tuple[Any, float]]:
    """Run `task` on each node named in `args` (node id -> its arguments); what each answered and when (the driver's
    clock). A node that fails, or has not answered by `deadline` (`late` says so), is marked so."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    by_id = {n.node_id: n for n in nodes}
    refs = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)).remote(*a): by_id[nid]
            for nid, a in args.items()}
    out: dict[str, tuple[Any, float]] = {}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        node, arrived = refs[ready[0]], time.time()
        try:
            out[node.node_id] = (ray.get(ready[0]), arrived)
        except ray.exceptions.RayError as exc:
            node.status = "died" if isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
                                                    ray.exceptions.TaskUnschedulableError)) else "failed"
            node.reason = _short(exc)
    for ref in pending:
        node = refs[ref]
        node.status, node.reason = "timeout", late
        ray.cancel(ref, force=True)
    return out


def _node_table(ray, since: datetime | None) -> tuple[list[NodeResult], set[str]]:
    """Every alive node and each node the GCS marked dead lately (after `since`, else within RECENT); the job ids
    of errmap's own scans."""
    gcs = ray._private.worker.global_worker.gcs_client
    table = gcs.get_all_node_info(timeout=30)
    cutoff = (since.timestamp() if since else time.time() - RECENT.total_seconds()) * 1000
    infos = [n for n in table.values() if n.state == 0 or n.end_time_ms >= cutoff]  # GcsNodeInfo.ALIVE is 0
    ips = [n.node_manager_address for n in infos]
    nodes = []
    for n in sorted(infos, key=lambda n: (not n.is_head_node, n.node_manager_address, n.node_id)):
        ip, nid = n.node_manager_address, n.node_id.hex()
        node = NodeResult(nid, ip, ip if ips.count(ip) == 1 else f"{ip}#{nid[:8]}")
        if n.state != 0:
            died = datetime.fromtimestamp(n.end_time_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")
            node.status = "dead"
            node.reason = f"not scanned (marked dead at {died}" + (f": {n.death_info.reason_message})" if n.death_info.reason_message else ")")
        nodes.append(node)
    jobs = {jid.hex() for jid, job in gcs.get_all_job_info(timeout=30).items()
            if JOB_TAG in job.config.metadata or _EARLIER_SCAN.search(job.entrypoint)}
    return nodes, jobs


def _unreadable(node: NodeResult, exc: Exception) -> None:
    node.status, node.reason = "failed", f"answered what errmap cannot read ({type(exc).__name__}: {str(exc)[:200]})"


def _share(lists: dict[str, list[tuple[str, str, int, str | None]]]) -> dict[str, list[tuple[str, str]]]:
    """Each node's files to scan (path, run): a file several nodes see (the same identity) goes to the one with the
    least to scan."""
    load = {nid: 0 for nid in lists}
    plan: dict[str, list[tuple[str, str]]] = {nid: [] for nid in lists}
    shared: dict[str, list[tuple[str, str, str, int]]] = {}
    for nid, files in lists.items():
        for path, run, size, ident in files:
            if ident is None:
                plan[nid].append((path, run))
                load[nid] += size
            else:
                shared.setdefault(ident, []).append((nid, path, run, size))
    for seen in sorted(shared.values(), key=lambda seen: -seen[0][3]):
        nid, path, run, size = min(seen, key=lambda s: (load[s[0]], s[0]))
        load[nid] += size
        plan[nid].append((path, run))
    return plan


def _scan(kb: KB, address: str | None, node_paths: list[str], since: datetime | None, node_timeout: float,
          connect_timeout: float) -> ClusterScan:
    gcs, notes = resolve(address, connect_timeout)
    ray = _connect(gcs)
    try:
        nodes, jobs = _node_table(ray, since)
        alive = [n for n in nodes if n.status == "ok"]
        deadline = time.monotonic() + node_timeout
        stamp = since.timestamp() if since else None
        lister = ray.remote(num_cpus=0, max_retries=0)(list_here)
        late = f"no answer within {node_timeout:g}s"
        listed = _on_nodes(ray, nodes, lister, {n.node_id: (node_paths, stamp, sorted(jobs)) for n in alive}, deadline, late)
        by_id = {n.node_id: n for n in nodes}
        lists = {}
        for nid, (answer, arrived) in listed.items():
            try:
                by_id[nid].clock_offset_s = round(float(answer["clock"]) - arrived, 3)
                by_id[nid].utc_offset_s = int(answer["utc_offset"])
                lists[nid] = [(str(p), str(r), int(size), None if i is None else str(i)) for p, r, size, i in answer["files"]]
            except (KeyError, TypeError, ValueError) as exc:
                _unreadable(by_id[nid], exc)
        plan = _share(lists)
        kb_ref = ray.put(kb)
        scanner = ray.remote(num_cpus=0, max_retries=0)(scan_here)
        scanned = _on_nodes(ray, nodes, scanner, {nid: (kb_ref, files, stamp) for nid, files in plan.items()}, deadline, late)
        answers = {}
        for nid, (answer, _) in scanned.items():
            if isinstance(answer, dict):
                answers[nid] = {**listed[nid][0], **answer}
            else:
                _unreadable(by_id[nid], TypeError(f"{type(answer).__name__}, not a dict"))
        payload = {nid: len(pickle.dumps(a)) for nid, a in answers.items()}
    finally:
        ray.shutdown()
    done = _merge(kb, nodes, answers, payload)
    done.notes = notes
    return done


# ---------------------------------------------------------------- the merge


@dataclass
class _Part:
    """One node's answer, read: its sources and errors, and its findings each with the time of its first dated line."""

    sources: list[Source]
    errors: list[InputError]
    runs: dict[str, str]
    found: list[tuple[float | None, int, Incident | Residue, tuple]]  # (time, order on the node, finding, key)


def _read(kb: KB, node: NodeResult, answer: dict[str, Any], by_ip: dict[str, str]) -> _Part:
    """A node's answer as report parts, its paths and lines named by the node; KeyError, TypeError or ValueError
    where it is not what a node sends."""
    where = f"{node.label}:"
    node.logs, node.skipped = str(answer["logs"]), int(answer["skipped"])
    node.scan_s = float(answer["seconds"])
    utc_offset, clock = float(node.utc_offset_s or 0), float(node.clock_offset_s or 0)
    sources, errors = [], []
    for path, nbytes, nlines, warning, error in answer["sources"]:
        sources.append(Source(where + path, int(nbytes), int(nlines), warning, error))
        if error:
            errors.append(InputError(where + path, str(error)))
    errors += [InputError(where + str(p), str(reason)) for p, reason in answer["errors"]]
    runs = {where + path: _run(run) for path, run in (f[:2] for f in answer["files"])}
    found = []

    def when(lines: list[Line]) -> float | None:
        t = next((t for t in (_epoch(x, utc_offset) for x in lines) if t is not None), None)
        return None if t is None else t - clock

    for (errno, fp, caps, order, evidence, count, until, ranks, hosts, files, words, via) in answer["incidents"]:
        entry = kb.entries.get(errno)
        if entry is None:
            continue
        failed_on = by_ip.get(via, via) if via else node.label
        for line in evidence:
            _place(line, where, failed_on, bool(via))
        fp = (_run(fp[0]), *fp[1:])
        inc = Incident(entry, fp, dict(caps), int(order), evidence=list(evidence)[:MAX_EVIDENCE], count=int(count),
                       until=int(until), ranks=set(ranks), hosts=set(hosts) | {failed_on},
                       files=dict.fromkeys(where + f for f in files), words=words)
        found.append((when(inc.evidence), int(order), inc, fp))
    for key, type_, message, first, order, inner, count, weak in answer["residue"]:
        _place(first, where, node.label, False)
        res = Residue(str(type_), str(message), first, int(order), inner, int(count), weak=bool(weak))
        found.append((when([first]), int(order), res, tuple(key)))
    node.files, node.lines = len(sources), sum(s.lines for s in sources)
    node.diagnoses = sum(isinstance(f[2], Incident) for f in found)
    node.unrecognized = len(found) - node.diagnoses
    node.dated = any(f[0] is not None for f in found) if found else None
    return _Part(sources, errors, runs, found)


def _run(run: str) -> str:
    """A run as the cluster knows it: the nodes' folders of one Ray session are one run (their temp dirs may differ)."""
    name = os.path.basename(run)
    return name if name.startswith("session_") else run


def _place(line: Line | None, where: str, host: str, forwarded: bool) -> None:
    """Name the node in a line that came from it (once: a line may be evidence twice); a line that Ray forwarded
    from where a task failed names that node."""
    if line is None or line.path.startswith(where):
        return
    line.path = where + line.path
    if line.host is None or forwarded:
        line.host = host


def _timeline(parts: list[_Part]) -> list[tuple[int, Incident | Residue, tuple]]:
    """Every node's findings in one order: by the time of their first dated line. A finding with no dated line
    takes the time of the one before it in its file (of the file's first dated one where none is before); the
    findings of a file with no dated line come after all dated ones, in node order, then their order on the node."""
    keyed = []
    for n, part in enumerate(parts):
        by_file: dict[str, list[tuple]] = {}
        for f in sorted(part.found, key=lambda f: f[1]):
            by_file.setdefault(f[2].first.path, []).append(f)
        for found in by_file.values():
            carried = next((f[0] for f in found if f[0] is not None), float("inf"))
            for t, order, item, key in found:
                carried = t if t is not None else carried
                keyed.append(((carried, n, order), item, key))
    keyed.sort(key=lambda k: k[0])
    return [(i, item, key) for i, (_, item, key) in enumerate(keyed, 1)]


def _merge(kb: KB, nodes: list[NodeResult], answers: dict[str, dict], payload: dict[str, int]) -> ClusterScan:
    by_ip: dict[str, str] = {}
    for n in nodes:
        by_ip[n.ip] = n.label if [m.ip for m in nodes].count(n.ip) == 1 else n.ip
    triage = Triage()
    sources: list[Source] = []
    errors: list[InputError] = []
    parts = []
    for node in nodes:
        if node.status == "ok" and node.node_id not in answers:
            node.status, node.reason = "failed", "no answer"
        if node.status == "ok":
            try:
                part = _read(kb, node, answers[node.node_id], by_ip)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                _unreadable(node, exc)
            else:
                node.payload_bytes = payload.get(node.node_id, 0)
                parts.append(part)
                sources += part.sources
                errors += part.errors
                triage.runs.update(part.runs)
                continue
        errors.append(InputError(f"node {node.label} ({node.node_id[:12]})", f"{node.status}: {node.reason}"))
    for order, item, key in _timeline(parts):
        triage._events = order
        if isinstance(item, Residue):
            res = triage.residue.get(key)
            if res is None:
                item.order = order
                triage.residue[key] = item
            else:
                res.count += item.count
            continue
        inc = triage.incidents.get(key)
        if inc is None:
            item.order = order
            triage.incidents[key] = item
            continue
        inc.words = inc.words if item.words is not None else None
        for k, v in item.captures.items():
            inc.captures.setdefault(k, v)
        inc.evidence += item.evidence[: MAX_EVIDENCE - len(inc.evidence)]
        inc.count += item.count
        inc.ranks |= item.ranks
        inc.hosts |= item.hosts
        inc.files.update(item.files)
    return ClusterScan(Report(sources, triage, errors), nodes)


def node_lines(nodes: list[NodeResult]) -> list[str]:
    """One line a node, for the text report: what it scanned and found, or why it did not answer."""
    out = []
    for n in nodes:
        head = f"node {n.label} ({n.node_id[:12]})"
        if n.status != "ok":
            out.append(f"{head}: {n.status}: {n.reason}")
        elif n.diagnoses or n.unrecognized:
            found = ", ".join(x for x in (n.diagnoses and f"{n.diagnoses} diagnos{'is' if n.diagnoses == 1 else 'es'}",
                                          n.unrecognized and f"{n.unrecognized} unrecognized") if x)
            undated = "" if n.dated else "; no dated line, so ranked after the nodes' dated findings"
            out.append(f"{head}: {found} in {n.files} files, {n.lines:,} lines{undated}")
        else:
            out.append(f"{head}: no errors ({n.files} files, {n.lines:,} lines)")
    return out
