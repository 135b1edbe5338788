"""GPU probes: count, names, compute capability, bf16, memory, processes, shared memory per block.

Each reads torch first (the view of the process that trains), then NVML, the CUDA driver library
and nvidia-smi, and applies CUDA_VISIBLE_DEVICES where the backend itself does not.
"""

from __future__ import annotations

import os

from errmap.probes import backends as b
from errmap.probes.base import Unknown, probe, via

GPU_TIMEOUT = 45.0  # room for one slow torch import (backends.LOAD_TIMEOUT) and the fallbacks after it

MIB = 1 << 20


def _torch_gpus():
    t = b.torch_cuda()
    return t, range(t.cuda.device_count())


@probe("gpu.count", timeout=GPU_TIMEOUT)
def gpu_count(ctx):
    def by_torch():
        t, idx = _torch_gpus()
        return via(len(idx), "torch")

    def by_libcuda():
        return via(b.libcuda().count(), "libcuda")

    def by_nvml():
        return via(len(b.nvml_devices()), "nvml")

    def by_smi():
        return via(len(b.smi_gpus()), "nvidia-smi")

    try:
        return b.gather(by_torch, by_libcuda, by_nvml, by_smi)
    except Unknown as exc:
        # No driver at all is a fact about this machine: zero GPUs, with the reason kept.
        text = str(exc)
        if "libcuda.so.1 not found" in text and "nvidia-smi not on PATH" in text:
            return via(0, "no NVIDIA driver library and no nvidia-smi")
        raise


@probe("gpu.names", timeout=GPU_TIMEOUT)
def gpu_names(ctx):
    def by_torch():
        t, idx = _torch_gpus()
        return via([t.cuda.get_device_name(i) for i in idx], "torch")

    def by_nvml():
        n = b.nvml()
        return via([b._text(n.nvmlDeviceGetName(h)) for _, h in b.nvml_devices()], "nvml")

    def by_libcuda():
        cu = b.libcuda()
        return via([cu.name(i) for i in range(cu.count())], "libcuda")

    def by_smi():
        return via([r["name"] for r in b.smi_gpus()], "nvidia-smi")

    return b.gather(by_torch, by_nvml, by_libcuda, by_smi)


def capabilities() -> tuple[list[float], str]:
    """Compute capability of each visible GPU as major.minor numbers (8.0, 8.6, 9.0, 12.0)."""

    def by_torch():
        t, idx = _torch_gpus()
        return [float("%d.%d" % t.cuda.get_device_capability(i)) for i in idx], "torch"

    def by_nvml():
        n = b.nvml()
        return [float("%d.%d" % n.nvmlDeviceGetCudaComputeCapability(h)) for _, h in b.nvml_devices()], "nvml"

    def by_libcuda():
        cu = b.libcuda()
        return [
            float(f"{cu.attribute(i, b.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)}.{cu.attribute(i, b.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)}")
            for i in range(cu.count())
        ], "libcuda"

    def by_smi():
        rows = b.smi_gpus()
        if rows and "compute_cap" not in rows[0]:
            raise Unknown("this nvidia-smi cannot report compute_cap")
        return [float(r["compute_cap"]) for r in rows], "nvidia-smi"

    return b.gather(by_torch, by_nvml, by_libcuda, by_smi)


@probe("gpu.capability", timeout=GPU_TIMEOUT)
def gpu_capability(ctx):
    caps, how = capabilities()
    return via(caps, how)


@probe("gpu.bf16", timeout=GPU_TIMEOUT)
def gpu_bf16(ctx):
    """Native bfloat16 needs compute capability 8.0 (Ampere) or newer; ROCm builds ask torch."""
    try:
        t = b.torch_cuda()
        if getattr(t.version, "hip", None):
            return via([bool(t.cuda.is_bf16_supported())] * t.cuda.device_count(), "torch (ROCm)")
    except Unknown:
        pass
    caps, how = capabilities()
    return via([c >= 8.0 for c in caps], f"compute capability >= 8.0 ({how})")


@probe("gpu.memory", timeout=GPU_TIMEOUT)
def gpu_memory(ctx):
    """Total, free and used memory of each visible GPU, in MiB (NVML and nvidia-smi need no context)."""

    def by_nvml():
        n = b.nvml()
        out = []
        for _, h in b.nvml_devices():
            m = n.nvmlDeviceGetMemoryInfo(h)
            out.append({"total_mib": m.total // MIB, "free_mib": m.free // MIB, "used_mib": m.used // MIB,
                        "free_fraction": round(m.free / m.total, 3) if m.total else None})
        return via(out, "nvml")

    def by_smi():
        out = []
        for r in b.smi_gpus():
            total, free = int(float(r["memory.total"])), int(float(r["memory.free"]))
            out.append({"total_mib": total, "free_mib": free, "used_mib": int(float(r["memory.used"])),
                        "free_fraction": round(free / total, 3) if total else None})
        return via(out, "nvidia-smi")

    def by_torch():
        t, idx = _torch_gpus()
        out = []
        for i in idx:
            free, total = t.cuda.mem_get_info(i)
            out.append({"total_mib": total // MIB, "free_mib": free // MIB, "used_mib": (total - free) // MIB,
                        "free_fraction": round(free / total, 3) if total else None})
        return via(out, "torch")

    return b.gather(by_nvml, by_smi, by_torch)


@probe("gpu.processes", timeout=GPU_TIMEOUT)
def gpu_processes(ctx):
    """Processes holding memory on the visible GPUs (other than this one), with MiB used."""

    def by_nvml():
        n = b.nvml()
        out = []
        for idx, h in b.nvml_devices():
            procs = []
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    procs += list(getattr(n, getter)(h))
                except n.NVMLError:
                    continue
            for p in procs:
                if p.pid == os.getpid():
                    continue
                used = p.usedGpuMemory  # None or a huge sentinel where the driver hides it (containers)
                ok = isinstance(used, int) and 0 <= used < 1 << 50
                out.append({"gpu": idx, "pid": p.pid, "used_mib": used // MIB if ok else None})
        return via(out, "nvml")

    def by_smi():
        text = b.command(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"])
        rows = b.smi_gpus()
        index = {r["uuid"]: int(r["index"]) for r in rows}
        out = []
        for line in text.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 3 and parts[0] in index and parts[1].isdigit():
                used = parts[2]
                out.append({"gpu": index[parts[0]], "pid": int(parts[1]), "used_mib": int(used) if used.isdigit() else None})
        return via(out, "nvidia-smi")

    return b.gather(by_nvml, by_smi)


@probe("gpu.shared_memory", timeout=GPU_TIMEOUT)
def gpu_shared_memory(ctx):
    """Opt-in shared memory per block of each visible GPU, in bytes: the limit Triton compares with."""

    def by_torch():
        t, idx = _torch_gpus()
        out = []
        for i in idx:
            props = t.cuda.get_device_properties(i)
            value = getattr(props, "shared_memory_per_block_optin", None)
            if value is None:
                raise Unknown(f"torch {t.__version__} does not report shared_memory_per_block_optin")
            out.append(int(value))
        return via(out, "torch")

    def by_libcuda():
        cu = b.libcuda()
        attr = b.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        return via([cu.attribute(i, attr) for i in range(cu.count())], "libcuda")

    return b.gather(by_torch, by_libcuda)


@probe("env.cuda_visible_devices", timeout=2)
def cuda_visible_devices(ctx):
    return via(os.environ.get("CUDA_VISIBLE_DEVICES"), "environment (none: unset)")
