"""`errmap scan --ray` against copying every node's logs to one machine, on a local Ray cluster.

    python bench/ray_cluster.py [--nodes 2,4,8] [--mb 100] [--big 4] [--transcript]

For each node count, starts that many `ray start` nodes on 127.0.0.1 (tests/local_ray.py: one CPU
each, own --temp-dir and ports) and times `errmap scan --ray` three times:

- empty: the session logs as Ray wrote them, so the fixed cost (the driver's start, ray.init, the
  package upload, a worker started on each node);
- even: MB of log in each node's session folder (the clean fixture logs repeated, one CUDA OOM
  fixture on node 1), then also copying every node's logs into one folder and scanning the copy;
- one big: node 0's log BIG times as large, the others as before.

Each row gives the wall time, each node's own scan time as the node measured it (the slowest and the
sum) and the bytes each node sent back to the driver. Figures are from one run. All nodes here share
this machine's cores: with more nodes than cores their scans queue for the CPU, so the wall time
follows the sum divided by the cores, not the slowest node, which only separate machines give.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from local_ray import LocalCluster  # noqa: E402

CLEAN = b"".join(Path(p).read_bytes() for p in sorted(glob.glob(str(ROOT / "fixtures/clean/*.log"))))
OOM = (ROOT / "fixtures/1017/verl-log-prob-oom.log").read_bytes()


def write_log(path: Path, mb: float, oom: bool) -> None:
    with open(path, "wb") as f:
        for _ in range(int(mb * 2**20) // len(CLEAN)):
            f.write(CLEAN)
        if oom:
            f.write(OOM)


def scan(c: LocalCluster, *args: str) -> tuple[float, dict, float]:
    """Wall time, JSON report, and this machine's load average before it (other work shares its cores)."""
    load = os.getloadavg()[0]
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "errmap", "scan", "--format", "json", *args], cwd=ROOT, env=c.env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t
    assert out.returncode in (0, 1), out.stderr[-2000:]
    return wall, json.loads(out.stdout), load


def row(nodes: int, case: str, mb: list[float], measured: tuple[float, dict, float], copy_s: float | None = None) -> dict:
    wall, doc, load = measured
    per_node = [n.get("scan_s", 0.0) for n in doc["nodes"]]
    sent = [n.get("payload_bytes", 0) for n in doc["nodes"]]
    r = {"nodes": nodes, "case": case, "mb": mb, "scan_ray_s": round(wall, 1),
         "node_scan_max_s": round(max(per_node), 2), "node_scan_sum_s": round(sum(per_node), 2),
         "sent_bytes_min": min(sent), "sent_bytes_max": max(sent),
         "first": doc["diagnoses"][0]["errno"] if doc["diagnoses"] else None, "load": load}
    if copy_s is not None:
        r["copy_and_scan_s"] = round(copy_s, 1)
    print(json.dumps(r), flush=True)
    return r


def bench(nodes: int, mb: float, big: float, transcript: bool) -> list[dict]:
    rows = []
    with LocalCluster(nodes, prefix="emrayb") as c:
        time.sleep(3)  # let the nodes' agents finish starting
        rows.append(row(nodes, "empty", [0] * nodes, scan(c, "--ray")))
        for i in range(nodes):
            write_log(c.logs(i) / "train.log", mb, oom=i == 1)
        even = scan(c, "--ray")
        t = time.perf_counter()
        dest = Path(c.root) / "copied"
        for i in range(nodes):
            shutil.copytree(c.logs(i), dest / f"node{i}", ignore=shutil.ignore_patterns("*.sock"))
        scan(c, str(dest))
        copy_s = time.perf_counter() - t
        shutil.rmtree(dest)
        rows.append(row(nodes, "even", [mb] * nodes, even, copy_s))
        write_log(c.logs(0) / "train.log", mb * big, oom=False)
        rows.append(row(nodes, "one big", [mb * big] + [mb] * (nodes - 1), scan(c, "--ray")))
        if transcript:
            print(subprocess.run([sys.executable, "-m", "errmap", "scan", "--ray"], cwd=ROOT, env=c.env,
                                 capture_output=True, text=True).stdout)
    return rows


def table(rows: list[dict]) -> str:
    out = ["| raylets | logs | scan --ray | slowest node / sum of nodes | copy + scan | sent per node | load |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        logs = ("session logs only" if r["case"] == "empty" else
                f"{max(r['mb']):g} MB each" if r["case"] == "even" else
                f"{max(r['mb']):g} MB on one, {min(r['mb']):g} MB on the others")
        out.append(f"| {r['nodes']} | {logs} | {r['scan_ray_s']} s | {r['node_scan_max_s']} s / {r['node_scan_sum_s']} s | "
                   f"{str(r['copy_and_scan_s']) + ' s' if 'copy_and_scan_s' in r else ''} | "
                   f"{r['sent_bytes_min'] / 1000:.1f}-{r['sent_bytes_max'] / 1000:.1f} KB | {r['load']:.1f} |")
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="2,4,8", help="node counts to run, comma-separated")
    ap.add_argument("--mb", type=float, default=100, help="MB of log written on each node")
    ap.add_argument("--big", type=float, default=4, help="how many times larger node 0's log is in the last case")
    ap.add_argument("--transcript", action="store_true", help="print the text report of the last scan of each cluster")
    a = ap.parse_args()
    rows = [r for n in a.nodes.split(",") for r in bench(int(n), a.mb, a.big, a.transcript)]
    print(table(rows))
