"""errmap doctor: the environment block and the codes a setup will hit, from real files and probes."""

from __future__ import annotations

import json

import pytest

from errmap.commands.doctor import Doctor, diagnose_setup
from errmap.probes.base import Fact

from conftest import errmap
from probe_files import model_dir, preference_parquet, raw_gsm8k_parquet, verl_parquet


def doctor_json(*args: str) -> tuple[int, dict]:
    proc = errmap("doctor", "--format", "json", *args, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return proc.returncode, json.loads(proc.stdout)


def codes(doc: dict) -> list[int]:
    return [w["errno"] for w in doc["warnings"]]


def test_doctor_json_reports_every_machine_probe():
    rc, doc = doctor_json()
    for name in ("gpu.count", "gpu.capability", "gpu.shared_memory", "driver.version", "driver.cuda_version",
                 "torch.version", "torch.cuda_version", "torch.arch_list", "nvcc.version", "pkg.versions",
                 "nccl.version", "host.memory", "host.shm", "host.disk", "env.nccl", "env.cuda_visible_devices"):
        fact = doc["facts"][name]
        assert "value" in fact or fact["unknown"], name
    assert rc == (1 if doc["warnings"] else 0)


def test_good_data_and_model_give_no_data_warnings(tmp_path):
    data = verl_parquet(tmp_path / "train.parquet")
    model = model_dir(tmp_path / "model")
    _, doc = doctor_json("--data", str(data), "--model", str(model), "--", "trainer.n_gpus_per_node=0")
    assert not {1033, 1034, 1035, 1040, 1041, 1043, 1015} & set(codes(doc))
    assert doc["data"][str(data)]["data.prompt_format"]["value"]["chat"] is True
    assert doc["model"]["model.vocab"]["value"]["fits"] is True


def test_preference_layout_misses_verl_columns(tmp_path):
    data = preference_parquet(tmp_path / "train.parquet")
    _, doc = doctor_json("--stack", "verl", "--data", str(data))
    (w,) = [w for w in doc["warnings"] if w["errno"] == 1033]
    assert "it reads RL prompts: prompt, data_source, reward_model" in w["says"] and w["file"] == str(data)
    assert 1034 in codes(doc)  # prompt is a plain string


def test_data_files_from_the_overrides_and_prompt_key(tmp_path):
    raw = raw_gsm8k_parquet(tmp_path / "raw.parquet")
    _, doc = doctor_json("--", f"data.train_files={raw}", f"data.val_files=[{tmp_path / 'missing.parquet'}]")
    assert str(raw) in doc["data"]
    (w,) = [w for w in doc["warnings"] if w["errno"] == 1033]
    assert "RL prompts: prompt, " in w["says"] and doc["stack"] == {"key": "verl", "from": "the overrides"}
    assert any(w["errno"] == 1035 and "does not exist" in w["says"] for w in doc["warnings"])


def test_not_parquet_is_1035(tmp_path):
    bad = tmp_path / "train.parquet"
    bad.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1\n")
    _, doc = doctor_json("--data", str(bad))
    (w,) = [w for w in doc["warnings"] if w["errno"] == 1035]
    assert "git-lfs" in w["says"]


def test_max_num_batched_tokens_below_sequence_length():
    _, doc = doctor_json("--", "data.max_prompt_length=4096", "data.max_response_length=8192",
                         "trainer.n_gpus_per_node=0")
    (w,) = [w for w in doc["warnings"] if w["errno"] == 1040]
    assert "8192 (verl default)" in w["says"] and "12288" in w["says"]
    _, doc = doctor_json("--", "data.max_prompt_length=4096", "data.max_response_length=8192",
                         "actor_rollout_ref.rollout.max_num_batched_tokens=12288", "trainer.n_gpus_per_node=0")
    assert 1040 not in codes(doc)


def test_more_gpus_asked_than_present():
    _, doc = doctor_json("--", "trainer.n_gpus_per_node=4096")
    if doc["facts"]["gpu.count"].get("value") == 0:  # no GPU at all: that is 1004, not 1032
        assert 1004 in codes(doc) and 1032 not in codes(doc)
        return
    (w,) = [w for w in doc["warnings"] if w["errno"] == 1032]
    assert "trainer.n_gpus_per_node=4096" in w["says"]


def test_more_gpus_asked_than_present_in_process():
    doc = _doctor_with({"gpu.count": 2, "gpu.capability": [9.0, 9.0]}, {"trainer.n_gpus_per_node": "8"})
    (w,) = [w for w in doc.warnings if w.errno == 1032]
    assert "set trainer.n_gpus_per_node=2" in w.says
    doc = _doctor_with({"gpu.count": 2, "gpu.capability": [9.0, 9.0]}, {"data.max_prompt_length": "512"})
    assert 1032 in {w.errno for w in doc.warnings}  # verl's default of 8 GPUs a node


def test_model_problems(tmp_path):
    base = model_dir(tmp_path / "base", chat_template=False, vocab=40, model_vocab=32)
    _, doc = doctor_json("--", f"actor_rollout_ref.model.path={base}", "trainer.n_gpus_per_node=0")
    assert {1043, 1015} <= set(codes(doc))
    _, doc = doctor_json("--model", str(tmp_path / "nowhere"))
    assert 1041 in codes(doc)


def _doctor_with(facts: dict, config: dict | None = None) -> Doctor:
    doc = Doctor(config or {}, [], None)
    doc.facts = {n: Fact(n, v) for n, v in facts.items()}
    doc.facts.setdefault("run.config", Fact("run.config", config or {}))
    doc.predict()
    return doc


def test_pre_ampere_gpu_predicts_1009_and_1010_and_h100_does_not():
    old = _doctor_with({"gpu.capability": [7.0], "gpu.bf16": [False], "gpu.count": 1})
    assert {1009, 1010} <= {w.errno for w in old.warnings}
    new = _doctor_with({"gpu.capability": [9.0], "gpu.bf16": [True], "gpu.count": 1})
    assert not {1009, 1010} & {w.errno for w in new.warnings}
    fp16 = _doctor_with({"gpu.capability": [7.5], "gpu.count": 1},
                        {"actor_rollout_ref.rollout.dtype": "float16", "actor_rollout_ref.model.override_config.attn_implementation": "eager"})
    assert not {1009, 1010} & {w.errno for w in fp16.warnings}


def test_driver_older_than_torch_cuda_predicts_1003():
    doc = _doctor_with({"driver.cuda_version": "12.2", "torch.cuda_version": "12.8", "gpu.count": 1})
    assert 1003 in {w.errno for w in doc.warnings}
    doc = _doctor_with({"driver.cuda_version": "13.0", "torch.cuda_version": "12.8", "gpu.count": 1})
    assert 1003 not in {w.errno for w in doc.warnings}


def test_small_shm_and_missing_arch():
    doc = _doctor_with({"host.shm": {"total_mib": 64, "free_mib": 60}, "torch.gpu_supported": [False], "gpu.count": 1})
    assert {1022, 1001} <= {w.errno for w in doc.warnings}


def test_text_output_has_a_paste_block(tmp_path):
    proc = errmap("doctor", "--stack", "verl", "--data", str(preference_parquet(tmp_path / "p.parquet")), timeout=300)
    out = proc.stdout.decode()
    assert proc.returncode == 1
    assert out.count("```") == 2 and "gpu.count" in out and "1033" in out


def test_doctor_runs_in_process(tmp_path):
    doc = diagnose_setup([str(verl_parquet(tmp_path / "t.parquet"))], None, ["trainer.n_gpus_per_node=0"])
    assert doc.data_facts and "gpu.count" in doc.facts
    json.dumps(doc.to_json(), default=str)


def test_prompts_longer_than_max_prompt_length(tmp_path):
    pytest.importorskip("tokenizers")
    from test_probes import _word_tokenizer

    m = model_dir(tmp_path / "m")
    _word_tokenizer(m)
    data = verl_parquet(tmp_path / "t.parquet")  # 6 tokens of text per prompt
    _, doc = doctor_json("--data", str(data), "--model", str(m), "--", "data.max_prompt_length=4", "trainer.n_gpus_per_node=0")
    (w,) = [w for w in doc["warnings"] if w["errno"] == 1036]
    assert "at least 6 tokens" in w["says"]
    _, doc = doctor_json("--data", str(data), "--model", str(m), "--", "data.max_prompt_length=512", "trainer.n_gpus_per_node=0")
    assert 1036 not in codes(doc)


def test_master_port_taken_and_bad_socket_ifname():
    import socket

    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        proc = errmap("doctor", "--format", "json", env={"MASTER_PORT": str(port), "NCCL_SOCKET_IFNAME": "no-such-if0"}, timeout=300)
    finally:
        s.close()
    doc = json.loads(proc.stdout)
    assert {1029, 1028} <= set(codes(doc))
    assert doc["facts"]["host.port"]["value"] == {"port": port, "free": False}


def test_text_is_laid_out_at_80_columns_in_english_and_chinese(tmp_path):
    from rich.cells import cell_len

    folder = tmp_path / ("a-folder-name-longer-than-a-line-" * 3)  # the path is wider than 80 wherever tests run
    folder.mkdir()
    data = str(preference_parquet(folder / "preference.parquet"))
    args = ("doctor", "--data", data, "--", "data.max_prompt_length=4096", "data.max_response_length=8192")
    for env in ({"COLUMNS": "80"}, {"COLUMNS": "80", "ERRMAP_LANG": "", "LC_ALL": "", "LANG": "zh_CN.UTF-8"}):
        proc = errmap(*args, env=env, timeout=300)
        out = proc.stdout.decode()
        assert proc.returncode == 1 and "1033" in out and "1040" in out, proc.stderr.decode()
        # every line fits but one that holds a token wider than a whole line (the file's path): it runs past, uncut
        over = [line for line in out.splitlines() if cell_len(line) > 80]
        assert all(len(line.split()[-1]) > 80 - 26 and str(tmp_path) in line.split()[-1] for line in over), over
        assert 0 < len(over) <= out.count(data)
        flat = " ".join(out.split())
        assert "data.max_prompt_length + data.max_response_length = 4096 + 8192" in flat  # wrapped, nothing lost
        assert f"-- data {data}" in flat and f"path={data}" in flat  # a path is shown whole, never cut
        lines = out.splitlines()
        said = lines.index(next(line for line in lines if line.startswith("  1040 "))) + 1
        assert lines[said].startswith("       ") and lines[said + 1].startswith("       ")  # a hanging indent
