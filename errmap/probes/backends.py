"""Lazy access to the things probes read: torch, NVML, the CUDA driver library and nvidia-smi.

Each loader is tried once per process and remembers why it failed, so every probe that needs it
answers the same reason ("torch not installed", "no NVIDIA driver (libnvidia-ml.so.1 not found)").
Nothing here is imported until a probe asks, so errmap runs where none of them exists.
"""

from __future__ import annotations

import ctypes
import importlib.metadata as md
import importlib.util
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from errmap.probes.base import Unknown

_lock = threading.RLock()
_cache: dict[str, Any] = {}


LOAD_TIMEOUT = 30.0  # a hung driver or a slow `import torch` is given up on once, not once per probe
_loading: dict[str, threading.Event] = {}


def _once(key: str, load, timeout: float = LOAD_TIMEOUT):
    """Load once, in a thread with a timeout; a failure or a hang is remembered as an Unknown."""
    with _lock:
        done = _loading.get(key)
        starter = done is None
        if starter:
            done = _loading[key] = threading.Event()

    if starter:
        def target() -> None:
            try:
                result = ("ok", load())
            except Unknown as exc:
                result = ("unknown", str(exc))
            except Exception as exc:
                result = ("unknown", f"{type(exc).__name__}: {exc}"[:300])
            with _lock:
                _cache.setdefault(key, result)
            done.set()

        threading.Thread(target=target, name=f"load {key}", daemon=True).start()
    if not done.wait(timeout):
        with _lock:
            _cache.setdefault(key, ("unknown", f"{key} did not answer within {timeout:g}s"))
            done.set()
    state, value = _cache[key]
    if state == "unknown":
        raise Unknown(value)
    return value


def reset() -> None:
    """Forget loaded backends (tests)."""
    with _lock:
        _cache.clear()
        _loading.clear()


# ---------------------------------------------------------------- torch


def dist_version(*names: str) -> str | None:
    """Installed version of the first of these distributions that is installed, read from metadata."""
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
        except Exception:
            continue
    return None


def torch_build() -> dict[str, Any]:
    """torch's version and CUDA/HIP build read from torch/version.py, without importing torch.

    This works when `import torch` itself is what fails (undefined symbols, a too-old driver).
    """

    def load() -> dict[str, Any]:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            raise Unknown("torch not installed")
        path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise Unknown(f"cannot read {path}: {exc.strerror or exc}") from None
        out: dict[str, Any] = {"version": dist_version("torch")}
        for key in ("__version__", "cuda", "hip", "git_version"):
            m = re.search(rf"^{key}(?:\s*:\s*[^=\n]+)?\s*=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", text, re.M)
            if m:
                out[key] = m[1] if m[1] is not None else m[2]
        out["version"] = out.pop("__version__", None) or out["version"]
        return out

    return _once("torch_build", load)


def torch():
    """The imported torch module (imports it on first use)."""

    def load():
        if importlib.util.find_spec("torch") is None:
            raise Unknown("torch not installed")
        import warnings

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import torch as t
        except Exception as exc:  # ImportError, OSError from a broken CUDA library, ...
            raise Unknown(f"import torch failed: {type(exc).__name__}: {exc}"[:300]) from None
        return t

    return _once("torch", load)


def torch_cuda():
    """torch, when it is a CUDA/ROCm build that sees at least the driver; else Unknown with why."""

    def load():
        t = torch()
        if not t.version.cuda and not getattr(t.version, "hip", None):
            raise Unknown(f"torch {t.__version__} is a CPU-only build")
        try:
            ok = t.cuda.is_available()
        except Exception as exc:
            raise Unknown(f"torch.cuda.is_available() failed: {exc}") from None
        if not ok:
            raise Unknown(f"torch {t.__version__} sees no CUDA device (no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them)")
        return t

    return _once("torch_cuda", load)


# ---------------------------------------------------------------- NVML


def nvml():
    """pynvml (from nvidia-ml-py), initialised."""

    def load():
        if importlib.util.find_spec("pynvml") is None:
            raise Unknown("nvidia-ml-py not installed")
        import pynvml

        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            if "Library Not Found" in str(exc):
                raise Unknown("no NVIDIA driver (libnvidia-ml.so.1 not found)") from None
            raise Unknown(f"NVML could not start: {exc}") from None
        return pynvml

    return _once("nvml", load)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_indices(physical: list[str]) -> list[int] | None:
    """Map CUDA_VISIBLE_DEVICES onto physical GPUs (given by UUID, in index order), as CUDA does:
    indices or UUID prefixes, stopping at the first entry that matches nothing. None: unset."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return None
    out: list[int] = []
    for item in (s.strip() for s in cvd.split(",")):
        if not item:
            break
        if re.fullmatch(r"\d+", item):
            idx = int(item)
            if idx >= len(physical) or idx in out:
                break
            out.append(idx)
            continue
        match = [i for i, uuid in enumerate(physical) if uuid.startswith(item) or uuid.startswith("GPU-" + item)]
        if len(match) != 1 or match[0] in out:
            break
        out.append(match[0])
    return out


def nvml_devices() -> list[tuple[int, Any]]:
    """(physical index, handle) of the GPUs this process would see, CUDA_VISIBLE_DEVICES applied."""
    n = nvml()
    count = n.nvmlDeviceGetCount()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [_text(n.nvmlDeviceGetUUID(h)) for h in handles]
    keep = visible_indices(uuids)
    order = range(count) if keep is None else keep
    return [(i, handles[i]) for i in order]


# ---------------------------------------------------------------- CUDA driver library

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97


class _CUDA:
    """The few calls of libcuda that need no context: count, name, attributes, memory size, version."""

    def __init__(self, lib):
        self.lib = lib

    def _call(self, fn: str, *args) -> None:
        rc = getattr(self.lib, fn)(*args)
        if rc != 0:
            raise Unknown(f"{fn} returned CUDA error {rc}")

    def version(self) -> int:
        v = ctypes.c_int()
        self._call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    def count(self) -> int:
        n = ctypes.c_int()
        self._call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def device(self, i: int) -> int:
        d = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(d), i)
        return d.value

    def attribute(self, i: int, attr: int) -> int:
        v = ctypes.c_int()
        self._call("cuDeviceGetAttribute", ctypes.byref(v), attr, self.device(i))
        return v.value

    def name(self, i: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buf, 256, self.device(i))
        return buf.value.decode(errors="replace")

    def total_memory(self, i: int) -> int:
        v = ctypes.c_size_t()
        self._call("cuDeviceTotalMem_v2", ctypes.byref(v), self.device(i))
        return v.value


def libcuda() -> _CUDA:
    """The CUDA driver library through ctypes, initialised (cuInit honours CUDA_VISIBLE_DEVICES)."""

    def load():
        lib = None
        for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise Unknown("no NVIDIA driver (libcuda.so.1 not found)")
        cuda = _CUDA(lib)
        rc = lib.cuInit(0)
        if rc == 100:  # CUDA_ERROR_NO_DEVICE
            raise Unknown("the CUDA driver found no device (CUDA_VISIBLE_DEVICES may hide them)")
        if rc != 0:
            raise Unknown(f"cuInit failed with CUDA error {rc}")
        return cuda

    return _once("libcuda", load)


def libcuda_version() -> int:
    """cuDriverGetVersion, which needs no cuInit and works on a machine whose GPUs are hidden."""

    def load():
        for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            return _CUDA(lib).version()
        raise Unknown("no NVIDIA driver (libcuda.so.1 not found)")

    return _once("libcuda_version", load)


# ---------------------------------------------------------------- commands


def command(args: list[str], timeout: float = 8.0) -> str:
    """stdout of a command; Unknown when it is missing, fails or hangs."""
    exe = shutil.which(args[0])
    if exe is None:
        raise Unknown(f"{args[0]} not found on PATH")
    try:
        proc = subprocess.run([exe, *args[1:]], capture_output=True, timeout=timeout, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        raise Unknown(f"{args[0]} did not answer within {timeout:g}s") from None
    except OSError as exc:
        raise Unknown(f"{args[0]} could not run: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise Unknown(f"{args[0]} failed: {msg[0][:200] if msg else f'exit status {proc.returncode}'}")
    return proc.stdout


SMI_FIELDS = ["index", "uuid", "name", "compute_cap", "memory.total", "memory.free", "memory.used", "driver_version"]


def smi_gpus() -> list[dict[str, str]]:
    """nvidia-smi's table of GPUs, CUDA_VISIBLE_DEVICES applied; older drivers lack compute_cap."""

    def load():
        fields = list(SMI_FIELDS)
        try:
            out = command(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        except Unknown as exc:
            if "not found on PATH" in str(exc):
                raise
            fields.remove("compute_cap")
            out = command(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        rows = [dict(zip(fields, (c.strip() for c in line.split(",")))) for line in out.splitlines() if line.strip()]
        keep = visible_indices([r["uuid"] for r in rows])
        return rows if keep is None else [rows[i] for i in keep]

    return _once("smi_gpus", load)


def smi_header() -> str:
    return _once("smi_header", lambda: command(["nvidia-smi"]))


def gather(*attempts) -> Any:
    """The first attempt that answers; else Unknown naming why each one could not."""
    reasons: list[str] = []
    for attempt in attempts:
        try:
            return attempt()
        except Unknown as exc:
            text = str(exc)
            if text not in reasons:
                reasons.append(text)
    raise Unknown(merge(reasons) or "no way to read it here")


def merge(reasons: list[str]) -> str:
    """One sentence from the reasons of each backend: 'no NVIDIA driver (a; b)' said once."""
    driver: list[str] = []
    other: list[str] = []
    for r in reasons:
        m = re.fullmatch(r"no NVIDIA driver \((.*)\)", r)
        if m:
            driver.append(m[1])
        elif r == "nvidia-smi not found on PATH":
            driver.append("nvidia-smi not on PATH")
        else:
            other.append(r)
    if driver:
        other.append(f"no NVIDIA driver ({'; '.join(driver)})")
    return "; ".join(other)
