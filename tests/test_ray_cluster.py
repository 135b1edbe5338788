"""`errmap scan --ray` against a real three-node Ray cluster on this machine.

Each node is a `ray start` of its own (local_ray.py: head plus two workers, one CPU each, own
--temp-dir, so its own node id and session log folder, own ports where nodes on one host collide). A job pins one task to each node: node 1 fails with a CUDA
out-of-memory error, node 0 with the NCCL watchdog timeout that follows it, node 2 stays clean. Their
stderr lands in each node's own logs, where the scan must find it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from local_ray import LocalCluster, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

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


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        job = subprocess.run([sys.executable, "-c", JOB, c.address], env=c.env, capture_output=True, text=True, timeout=180)
        assert job.returncode == 0, job.stderr[-3000:]
        ids = json.loads(job.stdout.strip().splitlines()[-1])
        yield {"address": c.address, "env": c.env, "ids": ids, "root": c.root, "cluster": c}


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
    assert all(n["scan_s"] >= 0 for n in nodes.values())  # each node's own scan time

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
    out = subprocess.run([sys.executable, "-m", "errmap", "scan", f"--ray=127.0.0.1:{free_port()}"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "no Ray cluster reachable" in out.stderr and "Traceback" not in out.stderr
    bad = errmap(cluster, "--ray", "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr


def _open_by_any_process(path: Path) -> bool:
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:
            pass
    return False


def test_a_node_that_dies_mid_scan_is_named_and_the_others_still_report(cluster):
    # Last in this module: it kills node 2's raylet. Node 2's scan is held up by a log of its own that is
    # slow to read (300,000 failure lines, each one through the full patterns); once its scan task has that
    # file open, the raylet is killed, and the task's worker follows it within a second
    # (raylet_death_check_interval_milliseconds), long before its scan could end.
    slow = cluster["cluster"].logs(2) / "slow.log"
    slow.write_text("".join(f"RuntimeError: step {i} failed\n" for i in range(300_000)))
    scan = subprocess.Popen([sys.executable, "-m", "errmap", "scan", "--ray", "--node-timeout", "60", "--format", "json"],
                            cwd=ROOT, env=cluster["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _open_by_any_process(slow):
            assert scan.poll() is None and time.monotonic() < deadline, "node 2 never started scanning its log"
            time.sleep(0.02)
        cluster["cluster"].kill_raylet(2)
        out, err = scan.communicate(timeout=240)
    finally:
        scan.kill()
    assert scan.returncode == 2, out
    doc = json.loads(out)
    assert doc["diagnoses"][0]["errno"] == 1017
    nodes = {n["node_id"]: n for n in doc["nodes"]}
    ids = cluster["ids"]
    assert nodes[ids["n2"]]["status"] in ("died", "timeout"), nodes[ids["n2"]]
    assert nodes[ids["n0"]]["status"] == nodes[ids["n1"]]["status"] == "ok"
    assert ids["n2"][:12] in err
