"""A Ray cluster of several `ray start` nodes on this one host, for the cluster tests and benchmark.

Each node is a `ray start --block` of its own: one CPU, its own --temp-dir (so its own node id and
session log folder), a resource `n<i>` to pin work to it, its own loopback address (127.0.0.<i+1>: Linux
routes all of 127/8 to this host, so errors name each node by an IP of its own; Ray reports the head by
this host's address), and its own ports where nodes on one host would otherwise collide: the dashboard
agent listens on 52365 on every node unless told otherwise, and each raylet draws its workers' ports from
the same default range. The GCS marks a node whose raylet is gone dead within about three seconds (one
health check a second, as a cluster configured so would). Stopping it leaves no process behind.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
WORKER_PORTS = 1000  # worker ports per node, from Ray's default range 10002-19999

_ALIVE = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
deadline = time.monotonic() + float(sys.argv[3])
while sum(n["Alive"] for n in ray.nodes()) < int(sys.argv[2]):
    if time.monotonic() > deadline:
        sys.exit("not all nodes came up: " + str([(n["NodeManagerAddress"], n["Alive"]) for n in ray.nodes()]))
    time.sleep(0.5)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:  # gone meanwhile
        return []


def ours(root: str) -> list[int]:
    """Processes whose command line names this cluster's temp dirs."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and root in "\0".join(_cmdline(int(p.name)))]


class LocalCluster:
    """`with LocalCluster(3) as c:` starts a head and two workers and waits until all are alive; with
    `dashboard=True` the head serves the Ray dashboard (and Jobs API) at `c.dashboard`."""

    def __init__(self, nodes: int, prefix: str = "emray", dashboard: bool = False):
        assert nodes * WORKER_PORTS <= 19999 - 10002
        self.nodes = nodes
        self.root = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # auth mode said outright: with it unset, a token that an earlier local ray.init() left in ~/.ray/auth_token
        # turns token auth on for `ray start` and the clients then fail to connect
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "disabled",
                    "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
                    "RAY_health_check_failure_threshold": "2"}
        self.dashboard = f"http://127.0.0.1:{free_port()}" if dashboard else None
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 180) -> None:
        for i in range(self.nodes):
            dash = (["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard.rsplit(':', 1)[1]}"]
                    if self.dashboard else ["--include-dashboard=false"])
            where = ["--head", f"--port={self.port}", *dash] if i == 0 else [f"--address={self.address}"]
            low = 10002 + i * WORKER_PORTS
            cmd = [RAY, "start", "--block", *where, "--num-cpus=1", f"--node-ip-address=127.0.0.{i + 1}", "--disable-usage-stats",
                   "--object-store-memory=100000000", f"--temp-dir={self.root}/t{i}", f"--resources={{\"n{i}\": 1}}",
                   f"--dashboard-agent-listen-port={free_port()}",
                   f"--min-worker-port={low}", f"--max-worker-port={low + WORKER_PORTS - 1}"]
            self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               start_new_session=True))
            if i == 0:
                self._wait_for_gcs(timeout)
        alive = subprocess.run([sys.executable, "-c", _ALIVE, self.address, str(self.nodes), str(timeout)], env=self.env,
                               timeout=timeout + 60, capture_output=True, text=True)
        if alive.returncode:
            raise RuntimeError(f"the cluster at {self.address} did not come up: {alive.stderr[-2000:]}")

    def _wait_for_gcs(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    raise RuntimeError(f"the head node did not come up on {self.address}") from None
                time.sleep(0.2)

    def logs(self, i: int) -> Path:
        """Node i's session log folder."""
        (found,) = glob.glob(f"{self.root}/t{i}/session_2*/logs")
        return Path(found)

    def kill_raylet(self, i: int) -> None:
        """SIGKILL node i's raylet, as a machine that fails would lose it."""
        pids = [p for p in ours(f"{self.root}/t{i}/") if Path(_cmdline(p)[0]).name == "raylet"]
        assert pids, f"no raylet of node {i}"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    def stop(self, grace: float = 10) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for pid in ours(self.root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)
