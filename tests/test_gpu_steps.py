"""Fix steps that fit the GPU a log names: a step for another kind of GPU (Pascal, Volta, Blackwell, AMD) is left
out, by default and with -v; a GPU the log does not name keeps them all."""

from __future__ import annotations

import json

from conftest import ROOT, errmap

H200 = ROOT / "fixtures/1001/h200-extension-sm80-only.log"
ROCM = ROOT / "fixtures/1001/rocm-torch-hip-invalid-device-function.log"
# an nvidia-smi row naming the card, then the CUDA runtime's message for a binary without its architecture
V100 = (b"|   0  Tesla V100-SXM2-32GB           On  |   00000000:00:1E.0 Off |                    0 |\n"
        b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
UNNAMED = V100.split(b"\n", 1)[1]

PASCAL, VOLTA, BLACKWELL, AMD = "Pascal (P40", "Volta (V100", "Blackwell (RTX 50xx", "AMD/ROCm ("
VERL_PASCAL = "verl < 0.6 on Pascal"


def steps(*args: str, input: bytes | None = None) -> list[str]:
    proc = errmap("scan", "--format", "json", *args, input=input)
    d = json.loads(proc.stdout)["diagnoses"][0]
    assert d["errno"] == 1001, d
    return d["fix"] + [o["text"] for o in d["fix_other_versions"]]


def starts(fix: list[str]) -> set[str]:
    return {kind for kind in (PASCAL, VOLTA, BLACKWELL, AMD, VERL_PASCAL) if any(s.startswith(kind) for s in fix)}


def test_an_h200_gets_no_step_for_other_gpus_and_the_rebuild_among_the_first():
    fix = steps(str(H200))
    assert starts(fix) == set(), fix
    assert any("TORCH_CUDA_ARCH_LIST" in s for s in fix[:3]), fix


def test_an_h200_gets_none_with_verbose_either():
    out = errmap("scan", "-v", str(H200), env={"COLUMNS": "200"}).stdout.decode()
    fix = out.split("Fix", 1)[1].split("issue", 1)[0]
    for kind in (PASCAL, VOLTA, BLACKWELL, AMD, VERL_PASCAL):
        assert kind not in fix, fix


def test_a_v100_gets_the_volta_step_not_the_pascal_one():
    assert starts(steps("-", input=V100)) == {VOLTA}


def test_a_gpu_the_log_does_not_name_keeps_every_kinds_step():
    assert starts(steps("-", input=UNNAMED)) == {PASCAL, VOLTA, BLACKWELL, AMD, VERL_PASCAL}


def test_a_rocm_log_keeps_the_amd_step():
    assert AMD in starts(steps(str(ROCM)))
