"""Version probes: driver, CUDA (driver, torch, nvcc), torch's build, packages, NCCL, importability.

Package versions come from installed metadata, never from importing the package; torch's CUDA
version is read from torch/version.py, so these answer even when `import torch` is what fails.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from errmap.probes import backends as b
from errmap.probes.base import Unknown, probe, via

# distribution names to try for each package a report names
PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "flash-attn": ("flash-attn", "flash_attn"),
    "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm"),
    "vllm": ("vllm",),
    "sglang": ("sglang",),
    "transformers": ("transformers",),
    "ray": ("ray",),
    "verl": ("verl",),
    "tensordict": ("tensordict",),
    "accelerate": ("accelerate",),
    "deepspeed": ("deepspeed",),
    "trl": ("trl",),
    "openrlhf": ("openrlhf",),
    "peft": ("peft",),
    "pyarrow": ("pyarrow",),
    "numpy": ("numpy",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
}


def _cuda_from_int(v: int) -> str:
    """12040 -> '12.4' (the driver API's encoding: 1000 * major + 10 * minor)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


@probe("driver.version", timeout=20)
def driver_version(ctx):
    def by_nvml():
        return via(b._text(b.nvml().nvmlSystemGetDriverVersion()), "nvml")

    def by_smi():
        rows = b.smi_gpus()
        if not rows:
            raise Unknown("nvidia-smi lists no GPU")
        return via(rows[0]["driver_version"], "nvidia-smi")

    def by_proc():
        try:
            text = Path("/proc/driver/nvidia/version").read_text()
        except OSError:
            raise Unknown("no NVIDIA driver (/proc/driver/nvidia/version missing)") from None
        m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if not m:
            raise Unknown("/proc/driver/nvidia/version has no version")
        return via(m[1], "/proc/driver/nvidia/version")

    return b.gather(by_nvml, by_smi, by_proc)


@probe("driver.cuda_version", timeout=20)
def driver_cuda_version(ctx):
    """The highest CUDA version the installed driver supports (nvidia-smi's 'CUDA Version')."""

    def by_nvml():
        n = b.nvml()
        fn = getattr(n, "nvmlSystemGetCudaDriverVersion_v2", None) or n.nvmlSystemGetCudaDriverVersion
        return via(_cuda_from_int(fn()), "nvml")

    def by_libcuda():
        return via(_cuda_from_int(b.libcuda_version()), "libcuda")

    def by_smi():
        m = re.search(r"CUDA Version:\s*(\d+\.\d+)", b.smi_header())
        if not m:
            raise Unknown("nvidia-smi shows no CUDA Version")
        return via(m[1], "nvidia-smi")

    return b.gather(by_nvml, by_libcuda, by_smi)


@probe("torch.version", timeout=5)
def torch_version(ctx):
    return via(b.torch_build()["version"], "torch/version.py")


@probe("torch.cuda_version", timeout=5)
def torch_cuda_version(ctx):
    """torch.version.cuda: None for a CPU or ROCm build."""
    return via(b.torch_build().get("cuda"), "torch/version.py")


@probe("torch.cuda_build", timeout=5)
def torch_cuda_build(ctx):
    info = b.torch_build()
    return via(bool(info.get("cuda") or info.get("hip")), "torch/version.py")


@probe("torch.arch_list", timeout=45)
def torch_arch_list(ctx):
    """The sm_XY/compute_XY targets compiled into torch (torch.cuda.get_arch_list needs no GPU here)."""
    t = b.torch()
    if not t.version.cuda and not getattr(t.version, "hip", None):
        return via([], f"torch {t.__version__} is a CPU-only build")
    flags = getattr(t._C, "_cuda_getArchFlags", None)
    text = flags() if flags else None
    if not text:
        raise Unknown("torch does not report its compiled architectures")
    return via(text.split(), "torch._C._cuda_getArchFlags")


def _covers(arch_list: list[str], cap: float) -> bool:
    """Whether a binary with these targets runs on a GPU of this capability: machine code (sm_XY) runs
    on the same major version and a minor at least XY's; PTX (compute_XY) is compiled for any GPU >= XY."""
    major, minor = (int(x) for x in f"{cap:.1f}".split("."))
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", arch)
        if not m:
            continue
        kind, target, special = m[1], (int(m[2]), int(m[3])), m[4]
        if special:  # sm_90a / compute_90a: that exact architecture only
            ok = target == (major, minor)
        elif kind == "sm":
            ok = target[0] == major and target[1] <= minor
        else:
            ok = target <= (major, minor)
        if ok:
            return True
    return False


@probe("torch.gpu_supported", timeout=45)
def torch_gpu_supported(ctx):
    """For each visible GPU, whether torch's compiled architectures can run on it."""
    from errmap.probes.gpu import capabilities

    arch = torch_arch_list(ctx)
    arch = arch[0] if isinstance(arch, tuple) else arch
    if not arch:
        raise Unknown("torch is a CPU-only build")
    caps, how = capabilities()
    return via([_covers(arch, c) for c in caps], f"torch arch list vs compute capability ({how})")


@probe("torch.cxx11_abi", timeout=45)
def torch_cxx11_abi(ctx):
    t = b.torch()
    return via(bool(t.compiled_with_cxx11_abi()), "torch.compiled_with_cxx11_abi()")


def _nvcc_path() -> str:
    import shutil

    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "nvcc").is_file():
            return str(Path(home, "bin", "nvcc"))
    raise Unknown("nvcc not found (not on PATH, nor in CUDA_HOME or /usr/local/cuda)")


@probe("nvcc.version", timeout=15)
def nvcc_version(ctx):
    path = _nvcc_path()
    text = b.command([path, "--version"], timeout=12)
    m = re.search(r"release (\d+\.\d+)", text)
    if not m:
        raise Unknown("nvcc --version printed no release number")
    return via(m[1], path)


@probe("pkg.versions", timeout=10)
def pkg_versions(ctx):
    """Installed versions (None: not installed) from package metadata; nothing is imported."""
    return via({name: b.dist_version(*dists) for name, dists in PACKAGES.items()}, "package metadata")


@probe("pkg.conflicts", timeout=20)
def pkg_conflicts(ctx):
    """Requirements of the training stack that the installed versions do not meet, like `pip check`."""
    import importlib.metadata as md

    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        raise Unknown("the packaging module is not installed") from None
    roots = ["verl", "openrlhf", "trl", "vllm", "sglang", "transformers", "accelerate", "deepspeed", "flash-attn", "tensordict", "ray", "torch"]
    out = []
    for root in roots:
        try:
            dist = md.distribution(root)
        except md.PackageNotFoundError:
            continue
        for text in dist.requires or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None:
                try:
                    if not req.marker.evaluate({"extra": ""}):
                        continue
                except Exception:
                    continue
            have = b.dist_version(req.name)
            if have is None:
                if req.name.lower() in {"torch", "vllm", "sglang", "transformers", "ray", "tensordict", "flash-attn", "triton", "accelerate", "peft", "numpy", "pyarrow"}:
                    out.append(f"{dist.metadata['Name']} {dist.version} requires {req}, which is not installed")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                out.append(f"{dist.metadata['Name']} {dist.version} requires {req}, but {req.name} {have} is installed")
    return via(out, "package metadata")


@probe("nccl.version", timeout=45)
def nccl_version(ctx):
    def by_torch():
        t = b.torch()
        if not t.version.cuda:
            raise Unknown(f"torch {t.__version__} has no NCCL (not a CUDA build)")
        v = t.cuda.nccl.version()
        return via(".".join(map(str, v)) if isinstance(v, tuple) else str(v), "torch.cuda.nccl.version()")

    def by_wheel():
        v = b.dist_version(*PACKAGES["nccl"])
        if v is None:
            raise Unknown("no nvidia-nccl wheel installed")
        return via(v, "nvidia-nccl wheel")

    return b.gather(by_torch, by_wheel)


_MODULE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
_EXTENSION = re.compile(r"(?P<stem>[A-Za-z_]\w*)\.(?:cpython-[\w-]+|abi3|cp\d+[\w-]*)\.so$|(?P<plain>[A-Za-z_]\w*)\.so$")


def module_of_library(path: str) -> str:
    """The Python module a compiled extension file is imported as: site-packages/vllm/_C.abi3.so ->
    vllm._C, flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so -> flash_attn_2_cuda. A system library
    (libcudart.so.12) is not a module."""
    path = path.strip("'\"")
    base = path.rsplit("/", 1)[-1]
    m = _EXTENSION.fullmatch(base)
    if not m or base.startswith("lib") and m["plain"]:
        raise Unknown(f"{base} is a shared library, not a Python module")
    stem = m["stem"] or m["plain"]
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            pkg = path.split(marker, 1)[1].rsplit("/", 1)[0] if "/" in path.split(marker, 1)[1] else ""
            return ".".join([*(p for p in pkg.split("/") if p), stem])
    return stem


@probe("module.importable", timeout=60, uses=("captures",))
def module_importable(ctx):
    """Whether the module named in the log imports here (a subprocess of this Python, with a timeout)."""
    name = ctx.capture("module", "package", "name")
    if not name and ctx.capture("library", "lib"):
        name = module_of_library(ctx.capture("library", "lib"))
    if not name:
        raise Unknown("the log names no module")
    name = name.strip("'\"")
    if not _MODULE.fullmatch(name):
        raise Unknown(f"{name!r} is not a module name")
    top = name.split(".")[0]
    if importlib.util.find_spec(top) is None:
        return via({"module": name, "importable": False, "error": f"No module named '{top}'"}, sys.executable)
    try:
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, errors="replace", timeout=55)
    except subprocess.TimeoutExpired:
        raise Unknown(f"import {name} did not finish within 55s") from None
    if proc.returncode == 0:
        return via({"module": name, "importable": True}, sys.executable)
    last = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return via({"module": name, "importable": False, "error": last[-1][:300] if last else f"exit status {proc.returncode}"}, sys.executable)
