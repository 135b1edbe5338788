"""`errmap scan --ray` against copying every node's logs to one machine, on a local Ray cluster.

    python bench/ray_cluster.py [NODES] [MB_PER_NODE] [--transcript]

Starts NODES `ray start` nodes on 127.0.0.1 (one CPU each, own --temp-dir), writes MB_PER_NODE of
log into each node's session log folder (the clean fixture logs repeated, one CUDA OOM fixture on
node 1), then times one cluster scan and one copy-then-scan, and prints the bytes each node sent
back. Figures are from one run; the cluster is stopped at the end.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_ray_cluster import _free_port, _ours  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).with_name("ray"))


def main(nodes: int, mb: int) -> None:
    root = tempfile.mkdtemp(prefix="emrayb", dir="/tmp")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": address}
    procs = []
    try:
        for i in range(nodes):
            where = ["--head", f"--port={port}", "--include-dashboard=false"] if i == 0 else [f"--address={address}"]
            procs.append(subprocess.Popen(
                [RAY, "start", "--block", *where, "--num-cpus=1", "--node-ip-address=127.0.0.1", f"--temp-dir={root}/t{i}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            time.sleep(4 if i == 0 else 1)
        import ray

        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        while sum(n["Alive"] for n in ray.nodes()) < nodes:
            time.sleep(0.5)
        ray.shutdown()
        clean = b"".join(Path(p).read_bytes() for p in sorted(glob.glob(str(ROOT / "fixtures/clean/*"))) if Path(p).is_file())
        oom = (ROOT / "fixtures/1017/verl-log-prob-oom.log").read_bytes()
        for i, logs in enumerate(sorted(glob.glob(f"{root}/t*/session_2*/logs"))):
            with open(f"{logs}/train.log", "wb") as f:
                for _ in range(mb * 2**20 // len(clean)):
                    f.write(clean)
                if i == 1:
                    f.write(oom)
        time.sleep(3)
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "errmap", "scan", "--ray", "--format", "json"], cwd=ROOT, env=env,
                             capture_output=True, text=True)
        ray_s = time.perf_counter() - t
        doc = json.loads(out.stdout)
        t = time.perf_counter()
        dest = Path(root) / "copied"
        for i, logs in enumerate(sorted(glob.glob(f"{root}/t*/session_2*/logs"))):
            shutil.copytree(logs, dest / f"node{i}", ignore=shutil.ignore_patterns("*.sock"))
        subprocess.run([sys.executable, "-m", "errmap", "scan", "--format", "json", str(dest)], cwd=ROOT,
                       capture_output=True)
        copy_s = time.perf_counter() - t
        sent = [n.get("payload_bytes", 0) for n in doc["nodes"]]
        logged = sum(int(x["bytes"]) for x in doc["sources"] if "bytes" in x)
        print(f"{nodes} nodes x {mb} MB: scan --ray {ray_s:.1f}s (first diagnosis {doc['diagnoses'][0]['errno']}); "
              f"copy + scan {copy_s:.1f}s; {logged / 2**20:.0f} MB of logs scanned; "
              f"bytes sent to the driver per node: {sent}")
        if "--transcript" in sys.argv:
            print(subprocess.run([sys.executable, "-m", "errmap", "scan", "--ray"], cwd=ROOT, env=env,
                                 capture_output=True, text=True).stdout)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
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


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 2, int(args[1]) if len(args) > 1 else 50)
