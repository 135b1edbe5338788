"""Host probes: RAM, /dev/shm, free disk, a port, network interfaces and the variables NCCL reads."""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
import socket
from pathlib import Path

from errmap.probes.base import Unknown, probe, via

GIB = 1 << 30
MIB = 1 << 20


@probe("host.memory", timeout=3)
def host_memory(ctx):
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        text = ""
    info = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            info[key] = int(parts[0]) * 1024
    if "MemTotal" in info:
        total, avail = info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))
        how = "/proc/meminfo"
    else:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            raise Unknown("neither /proc/meminfo nor sysconf reports memory here") from None
        how = "sysconf"
    return via({"total_gib": round(total / GIB, 1), "available_gib": round(avail / GIB, 1),
                "available_fraction": round(avail / total, 3) if total else None}, how)


@probe("host.shm", timeout=3)
def host_shm(ctx):
    path = "/dev/shm"
    if not os.path.isdir(path):
        raise Unknown("/dev/shm does not exist here")
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    return via({"total_mib": st.f_blocks * st.f_frsize // MIB, "free_mib": free // MIB, "free_bytes": free}, "statvfs /dev/shm")


def _existing(path: Path) -> Path:
    path = path.expanduser()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


@probe("host.disk", timeout=5, uses=("captures", "config"))
def host_disk(ctx):
    """Free space on the file system of the path named in the log (or the current folder)."""
    named = ctx.capture("path", "file", "dir", "directory") or ctx.setting("trainer.default_local_dir")
    path = _existing(Path(named)) if named else Path.cwd()
    usage = shutil.disk_usage(path)
    return via({"path": str(path), "free_gib": round(usage.free / GIB, 2), "total_gib": round(usage.total / GIB, 1),
                "used_fraction": round(usage.used / usage.total, 3) if usage.total else None}, "statvfs")


@probe("host.port", timeout=3, uses=("captures", "config"))
def host_port(ctx):
    """Whether the port named in the log (or MASTER_PORT) can be bound now."""
    raw = ctx.capture("port") or os.environ.get("MASTER_PORT")
    if not raw or not str(raw).isdigit():
        raise Unknown("the log names no port and MASTER_PORT is unset")
    port = int(raw)
    if not 0 < port < 65536:
        raise Unknown(f"{port} is not a port number")
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return via({"port": port, "free": False}, f"bind {host}:{port}")
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise Unknown(f"binding port {port} needs privileges here") from None
            continue
        finally:
            s.close()
        return via({"port": port, "free": True}, f"bind {host}:{port}")
    raise Unknown(f"could not open a socket to test port {port}")


@probe("env.nccl", timeout=2)
def env_nccl(ctx):
    return via({k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}, "environment")


@probe("env.alloc_conf", timeout=2)
def env_alloc_conf(ctx):
    for key in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if key in os.environ:
            return via(os.environ[key], key)
    return via(None, "environment (unset)")


def _ipv4(name: str) -> str | None:
    try:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except (OSError, ImportError):
        return None


@probe("net.interfaces", timeout=5)
def net_interfaces(ctx):
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        names = []
    if not names:
        raise Unknown("no network interface listed here")
    out = {}
    for name in names:
        state = None
        try:
            state = Path(f"/sys/class/net/{name}/operstate").read_text().strip()
        except OSError:
            pass
        out[name] = {"state": state, "ipv4": _ipv4(name)}
    return via(out, "if_nameindex, /sys/class/net")


def ifname_matches(spec: str, names: list[str]) -> list[str]:
    """Interfaces NCCL_SOCKET_IFNAME selects: comma-separated prefixes, '=' for exact names,
    a leading '^' to exclude instead (as NCCL documents the variable)."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    items = [s for s in spec.split(",") if s]

    def hit(name: str) -> bool:
        return any(name == i if exact else name.startswith(i) or fnmatch.fnmatch(name, i) for i in items)

    return [n for n in names if hit(n) != exclude]


@probe("net.socket_ifname", timeout=5)
def net_socket_ifname(ctx):
    """Whether NCCL_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME) selects an interface that is up here."""
    spec = os.environ.get("NCCL_SOCKET_IFNAME")
    var = "NCCL_SOCKET_IFNAME"
    if spec is None and "GLOO_SOCKET_IFNAME" in os.environ:
        spec, var = os.environ["GLOO_SOCKET_IFNAME"], "GLOO_SOCKET_IFNAME"
    if spec is None:
        return via({"set": None, "matches": None, "ok": None}, "environment (unset: NCCL picks an interface itself)")
    interfaces = net_interfaces(ctx)[0]
    names = [n for n, info in interfaces.items() if info["state"] in ("up", "unknown", None)]
    matches = ifname_matches(spec, names)
    return via({"set": spec, "matches": matches, "ok": bool(matches)}, f"{var} vs interfaces up")
