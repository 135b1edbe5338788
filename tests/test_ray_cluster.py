"""`errmap scan --ray` against a real three-node Ray cluster on this machine.

Each node is a `ray start` of its own (head plus two workers, one CPU each, own --temp-dir, so its
own node id and session log folder). A job pins one task to each node: node 1 fails with a CUDA
out-of-memory error, node 0 with the NCCL watchdog timeout that follows it, node 2 stays clean. Their
stderr lands in each node's own logs, where the scan must find it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).with_name("ray"))

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 3.06 GiB is free. Including non-PyTorch memory, this process has 76.08 GiB memory in use.")
NCCL = ("[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800843 milliseconds before timing out.")

JOB = """
import json, sys, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()
@ray.remote(num_cpus=0, max_retries=0)
def work(line):
    if line:
        print(line, file=sys.stderr, flush=True)
        raise RuntimeError("step failed")
ids = {n: ray.get(where.options(resources={n: 1}).remote()) for n in ("n0", "n1", "n2")}
lines = {"n0": %r, "n1": %r, "n2": ""}
for n, node in ids.items():
    try:
        ray.get(work.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(lines[n]))
    except ray.exceptions.RayTaskError:
        pass
print(json.dumps(ids))
""" % (NCCL, OOM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ours(root: str) -> list[int]:
    """Processes whose command line names this cluster's temp dirs."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if root in (p / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="module")
def cluster():
    root = tempfile.mkdtemp(prefix="emray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": address}
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    procs = []
    try:
        for i in range(3):
            where = ["--head", f"--port={port}", "--include-dashboard=false"] if i == 0 else [f"--address={address}"]
            cmd = [RAY, "start", "--block", *where, *common, f"--temp-dir={root}/t{i}", f"--resources={{\"n{i}\": 1}}"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
            if i == 0:
                time.sleep(4)
        job = subprocess.run([sys.executable, "-c", JOB, address], env=env, capture_output=True, text=True, timeout=180)
        assert job.returncode == 0, job.stderr[-3000:]
        ids = json.loads(job.stdout.strip().splitlines()[-1])
        yield {"address": address, "env": env, "ids": ids, "root": root}
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        for pid in _ours(root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)


def errmap(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "errmap", "scan", *args], cwd=ROOT, env=cluster["env"],
                          capture_output=True, text=True, timeout=240)


def test_root_cause_first_with_its_node_and_the_clean_node_listed(cluster):
    ids = cluster["ids"]
    out = errmap(cluster, "--ray", "--format", "json")
    assert out.returncode == 1 and out.stdout, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    first = doc["diagnoses"][0]
    assert first["errno"] == 1017, [d["errno"] for d in doc["diagnoses"]]
    # the evidence names the node it came from and a file in that node's own log folder
    assert f"{cluster['root']}/t1/" in first["evidence"][0]["file"]
    timeout = next(d for d in doc["diagnoses"] if "NCCL" in d["title"] or d["role"] == "consequence")
    assert f"{cluster['root']}/t0/" in timeout["evidence"][0]["file"]
    nodes = {n["node_id"]: n for n in doc["nodes"]}
    assert set(nodes) == set(ids.values())
    assert all(n["status"] == "ok" for n in nodes.values())
    assert nodes[ids["n2"]]["diagnoses"] == 0 and nodes[ids["n1"]]["diagnoses"] >= 1
    # only events travel back, not the logs
    assert all(n["payload_bytes"] < 100_000 for n in nodes.values())

    text = errmap(cluster, "--ray")
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert "1017" in next(ln for ln in lines if ln.startswith("1."))
    assert "led to" in text.stdout
    assert any(ids["n2"][:12] in ln and "no errors" in ln for ln in lines), text.stdout


def test_since_drops_older_files(cluster):
    out = errmap(cluster, "--ray", "--since", "2000-01-01", "--format", "json")
    assert json.loads(out.stdout)["diagnoses"]
    future = errmap(cluster, "--ray", "--since", "2999-01-01", "--format", "json")
    assert future.returncode == 0, future.stdout
    assert not json.loads(future.stdout)["diagnoses"]


def test_unreachable_cluster_and_bad_since_are_clear_errors(cluster):
    env = {**cluster["env"], "RAY_ADDRESS": ""}
    out = subprocess.run([sys.executable, "-m", "errmap", "scan", f"--ray=127.0.0.1:{_free_port()}"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "no Ray cluster reachable" in out.stderr and "Traceback" not in out.stderr
    bad = errmap(cluster, "--ray", "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr


def test_a_dead_node_is_named_and_the_others_still_report(cluster):
    # Last in this module: it kills node 2's raylet, which the cluster still lists as alive for a while.
    raylets = [p for p in _ours(f"{cluster['root']}/t2")
               if "raylet" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace").split("\0")[0]]
    assert raylets
    for pid in raylets:
        os.kill(pid, signal.SIGKILL)
    out = errmap(cluster, "--ray", "--node-timeout", "15", "--format", "json")
    assert out.returncode == 2, out.stdout
    doc = json.loads(out.stdout)
    assert doc["diagnoses"][0]["errno"] == 1017
    dead = next(n for n in doc["nodes"] if n["node_id"] == cluster["ids"]["n2"])
    assert dead["status"] in ("died", "timeout"), dead
    assert cluster["ids"]["n2"][:12] in out.stderr
