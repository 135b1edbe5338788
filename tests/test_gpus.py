"""The GPU a log names, and what errmap says with it (real CLI runs on fixtures; kb/gpus.yaml as shipped)."""

from __future__ import annotations

import json

from conftest import FIXTURES, errmap, scan_json

from errmap.kb import gpus
from errmap.kb.load import load
from errmap.kb.check import gpu_table_problems
from errmap.scan.matcher import Matcher
from errmap.probes.base import Fact
from errmap.scan.parallel import scan
from errmap.scan.source import Source

P40 = FIXTURES / "1009" / "verl-vllm-v0-rollout-p40.log"
RTX3090 = FIXTURES / "1017" / "rtx3090-nvidia-smi-then-oom.log"
QUADRO = FIXTURES / "1009" / "vllm-v1-quadro-rtx-6000.log"
H200 = FIXTURES / "1001" / "h200-plain-cuda-binary-sm80-only.log"
# Advice to run in fp16, as 1009's general and per-stack fp16 steps give it.
FP16_ADVICE = ("dtype=float16", "--dtype half", "fp16=True", "--fp16 True", "param_dtype=fp16", '"fp16": {"enabled": true}',
               "--mixed_precision fp16")


def test_p40_bf16_says_p40_fp32_and_the_vllm_caveat_and_no_fp16():
    out = scan_json(P40)
    (d,) = out["diagnoses"]
    assert d["errno"] == 1009 and out["framework"] == "verl"
    gpu = out["gpu"]
    assert gpu == d["gpu"] and gpu["name"] == "Tesla P40" and gpu["capability"] == "6.1" and gpu["source"] == "log"
    assert gpu["fp16"] == "slow" and gpu["bf16"] is False and gpu["shared_memory_per_block"] == 49152
    assert "Here it is the Tesla P40, compute capability 6.1." in d["cause"]
    fix = " ".join(d["fix"])
    assert "fp32, not fp16" in fix and "`actor_rollout_ref.rollout.dtype=float32`" in fix
    assert "attn_implementation=eager" in fix or 'attn_implementation="sdpa"' in fix
    assert "vLLM's GPU builds need compute capability 7.5 or newer" in fix and "gpu.cuda.inc.md" in fix
    assert not [a for a in FP16_ADVICE if a in fix], d["fix"]
    text = errmap("scan", "--verbose", str(P40)).stdout.decode()
    assert "(verl; Tesla P40, compute capability 6.1, 24 GB;" in text, text
    assert "fp32, not fp16" in text and "another engine" in text and "--dtype half" not in text


def test_the_same_error_on_a_v100_keeps_the_fp16_steps_and_gets_the_vllm_caveat():
    (d,) = scan_json(FIXTURES / "1009" / "verl-vllm-v0-rollout-v100.log")["diagnoses"]
    assert d["gpu"]["name"] == "Tesla V100-SXM2-32GB" and d["gpu"]["capability"] == "7.0" and d["gpu"]["memory_gb"] == 32
    assert d["fix"][0].startswith("verl: run the rollout in fp16") and not any("fp32, not fp16" in s for s in d["fix"])
    assert any("vLLM's GPU builds need compute capability 7.5" in s for s in d["fix"])


def test_rtx3090_oom_names_the_card_and_its_24_gb():
    out = scan_json(RTX3090)
    (d,) = out["diagnoses"]
    assert d["errno"] == 1017 and d["captures"]["capacity"] == "23.69 GiB" and d["captures"]["device"] == "0"
    gpu = d["gpu"]
    assert gpu["name"] == "NVIDIA GeForce RTX 3090" and gpu["capability"] == "8.6" and gpu["memory_gb"] == 24
    assert gpu["memory_seen"] == "23.69 GiB" and gpu["line"] == 10  # the nvidia-smi row
    assert "The GPU in this log is the NVIDIA GeForce RTX 3090, a 24 GB card." in d["cause"]
    text = errmap("scan", str(RTX3090)).stdout.decode()
    assert "NVIDIA GeForce RTX 3090, compute capability 8.6, 24 GB;" in text.splitlines()[0], text


def test_an_h200_recording_still_gives_its_codes_and_names_the_h200():
    out = scan_json(H200)
    assert [d["errno"] for d in out["diagnoses"]] == [1001, 1005]
    assert out["gpu"]["name"] == "NVIDIA H200" and out["gpu"]["capability"] == "9.0" and out["gpu"]["memory_gb"] == 141
    assert out["gpu"]["shared_memory_per_block"] == 232448  # what the H200 reported when the fixtures were recorded
    # the recorded OOM names no GPU: its 139.80 GiB total is not taken for a model
    oom = scan_json(FIXTURES / "1017" / "gpu-empty-180gib.log")
    assert oom["gpu"] is None and oom["diagnoses"][0]["gpu"] is None


def test_a_gpu_absent_from_the_table_is_named_without_facts():
    out = scan_json(QUADRO)
    d = out["diagnoses"][0]
    assert d["errno"] == 1009
    gpu = d["gpu"]
    assert gpu["name"] == "Quadro RTX 6000" and gpu["capability"] == "7.5"  # both from vLLM's message
    assert gpu["note"] == "not in errmap's GPU table"
    assert not {"model", "memory_gb", "architecture", "bf16", "fp16", "tensor_cores", "shared_memory_per_block",
                "flash_attention_2", "vllm_wheels", "sources"} & gpu.keys(), gpu
    assert not any("fp32, not fp16" in s or "vLLM's GPU builds" in s for s in d["fix"]), d["fix"]
    assert d["fix"][0].startswith("vLLM alone: `--dtype half`")
    text = errmap("scan", str(QUADRO)).stdout.decode()
    assert "Quadro RTX 6000, compute capability 7.5 (not in errmap's GPU table);" in text.splitlines()[0], text


def test_probe_facts_win_over_the_log(tmp_path):
    """This machine's GPU as the gpu.names/gpu.capability probes return it (their Fact values) replaces the log's."""
    report = scan(Matcher(load()), [Source(str(P40))], [])
    assert report.gpu().name == "Tesla P40"
    probed = gpus.from_probe(Fact("gpu.names", ["NVIDIA A100-SXM4-80GB"], via="torch"), Fact("gpu.capability", [8.0], via="torch"))
    assert probed.source == "probe" and probed.capability == "8.0"
    report.probed_gpu = probed
    (d,) = report.diagnoses
    assert d["gpu"]["name"] == "NVIDIA A100-SXM4-80GB" and d["gpu"]["source"] == "probe" and d["gpu"]["memory_gb"] == 80
    assert d["fix"][0].startswith("verl: run the rollout in fp16") and not any("fp32, not fp16" in s for s in d["fix"])
    # unknown or empty facts (no GPU here) leave the log's GPU in place
    assert gpus.from_probe(Fact("gpu.names", known=False, reason="no NVIDIA driver"), Fact("gpu.capability", [])) is None
    assert gpus.from_probe(Fact("gpu.names", []), Fact("gpu.capability", [])) is None
    # an unknown model from the probe keeps the probed capability, still without table facts
    other = gpus.from_probe(Fact("gpu.names", ["NVIDIA RTX A6000"]), Fact("gpu.capability", [8.6]))
    assert other.capability == "8.6" and other.to_json()["note"] == "not in errmap's GPU table"


def test_probe_on_a_machine_without_a_gpu_keeps_the_log_gpu():
    proc = errmap("scan", "--probe", "--format", "json", str(P40), timeout=300)
    doc = json.loads(proc.stdout)
    assert doc["gpu"]["name"] == "Tesla P40" and doc["gpu"]["source"] == "log"


def test_chinese_json_steps_follow_the_gpu():
    doc = scan_json(P40, env={"ERRMAP_LANG": "zh"})
    zh = doc["diagnoses"][0]["zh"]
    assert "这里是 Tesla P40，计算能力 6.1。" in zh["cause"]
    assert zh["fix"][0].startswith("verl 在 Tesla P40 上") and not any("dtype=float16" in s for s in zh["fix"])
    assert len(zh["fix"]) == len(doc["diagnoses"][0]["fix"])


def test_names_as_lines_print_them():
    assert gpus.named_in(b"|   0  NVIDIA GeForce RTX 3090        Off | 00000000:01:00.0 Off |                  N/A |") == "NVIDIA GeForce RTX 3090"
    assert gpus.named_in(b"|   0  Tesla P40           Off  | 00000000:04:00.0 Off |                    0 |") == "Tesla P40"
    assert gpus.named_in(b"|   0  Quadro RTX 8000     Off  | 00000000:3B:00.0 Off |                  Off |") == "Quadro RTX 8000"
    assert gpus.named_in(b"torch 2.11.0+cu130, GPU NVIDIA H200 sm_90, TORCH_CUDA_ARCH_LIST=8.0") == "NVIDIA H200"
    # a model the table lacks is never read as its shorter neighbour, and plain words are no GPU
    assert gpus.named_in(b"running on NVIDIA GeForce RTX 3090 Ti") is None
    assert gpus.named_in(b"install the NVIDIA driver 535 and a T4 or an A10") is None
    assert gpus.GPU("b'Tesla T4'", "log").capability == "7.5"
    assert gpus.GPU("NVIDIA H100 80GB HBM3", "log").model.name == "NVIDIA H100 SXM"


def test_kb_check_reports_a_broken_gpu_table_with_its_line(tmp_path):
    table = (gpus.table_path()).read_text(encoding="utf-8")
    bad = tmp_path / "gpus.yaml"
    bad.write_text(table.replace("    memory_gb: 24\n", "    memory_gb: -24\n", 1).replace('capability: "6.1"', 'capability: "6.x"', 1))
    problems = gpu_table_problems(bad)
    lines = table.splitlines()
    first_mem = next(i for i, line in enumerate(lines, 1) if line == "    memory_gb: 24")
    assert f"{bad}:{first_mem}: gpus.0.memory_gb: Input should be greater than 0" in problems, problems
    assert any(p.startswith(f"{bad}:") and "architectures.1.capability" in p for p in problems), problems
    assert gpu_table_problems(gpus.table_path()) == []


def test_watch_prints_the_gpu_steps_as_the_failure_arrives():
    proc = errmap("watch", "--format", "text", input=P40.read_bytes())
    text = proc.stdout.decode() + proc.stderr.decode()
    assert "verl on the Tesla P40: run the rollout and the FSDP workers in fp32" in text, text
    assert "dtype=float16" not in text and "--dtype half" not in text


def test_triton_shared_memory_on_a_p40_from_its_nvidia_smi_table():
    (d,) = scan_json(FIXTURES / "1012" / "p40-nvidia-smi-then-prefix-prefill.log")["diagnoses"]
    assert d["errno"] == 1012 and d["captures"]["limit"] == "49152"
    assert d["gpu"]["name"] == "Tesla P40" and d["gpu"]["line"] == 9 and d["gpu"]["shared_memory_per_block"] == 49152
    assert "The GPU in this log is the Tesla P40 (compute capability 6.1), whose opt-in maximum is 49152 bytes per block." in d["cause"]


def test_a_hostile_long_table_like_line_is_no_gpu(tmp_path):
    line = "|   0  x" + " On " * 250_000
    assert gpus.named_in(line.encode()) is None
    log = tmp_path / "wide.log"
    log.write_text(line + "\nNVIDIA " + "H2" * 300_000 + "\n")
    assert scan_json(log)["gpu"] is None


def test_each_run_has_its_own_gpu():
    out = scan_json(P40, RTX3090)
    assert out["gpu"] is None  # two runs: no GPU for the whole report
    assert {d["run"]: d["gpu"]["name"] for d in out["diagnoses"]} == {str(P40): "Tesla P40", str(RTX3090): "NVIDIA GeForce RTX 3090"}
    text = " ".join(errmap("scan", str(P40), str(RTX3090)).stdout.decode().split())  # a long checkout path wraps
    assert "(verl, Tesla P40, " in text and "(PyTorch / HF Trainer, NVIDIA GeForce RTX 3090, " in text, text
