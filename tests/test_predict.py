"""Predictions are KB data (`predicts:`): doctor runs yours (--kb), kb check names a bad one's file
and line, explain and the code's page show what doctor checks, and `exits:` names a signal's cause."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from conftest import errmap
from errmap.kb import load as kbmod
from errmap.commands.doctor import Doctor
from errmap.probes.base import Fact
from probe_files import verl_parquet

ENTRY = """\
errno: 9001
slug: no-label-column
title: Our reward needs a label column
group: In-house
role: root
summary: Our reward function reads a label column that the data file lacks.
anchors:
  - literal: "KeyError: 'label'"
    regex: "KeyError: 'label'"
    source: "our reward function (reward/label.py)"
cause: The reward function looks up row["label"] and the parquet file has no such column.
fix:
  - Add the label column with our preprocessing script.
"""
PREDICTS = """\
predicts:
  - when:
      - fact: data.columns
        op: missing
        value: [label]
        name: missing
    says: "{file} has no column {missing}, which our reward function reads"
  - when:
      - setting: trainer.total_epochs
        op: ">"
        value: 100
        name: epochs
    says: "trainer.total_epochs={epochs} is more than our cluster's job limit allows"
"""


def user_kb(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "mykb"
    folder.mkdir(exist_ok=True)
    (folder / "9001-no-label-column.yaml").write_text(text, encoding="utf-8")
    return folder


def warnings(*args: str) -> list[dict]:
    proc = errmap("doctor", "--format", "json", *args, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return [w for w in json.loads(proc.stdout)["warnings"] if w["errno"] == 9001]


def test_doctor_runs_the_predictions_of_your_own_kb(tmp_path):
    folder = user_kb(tmp_path, ENTRY + PREDICTS)
    data = verl_parquet(tmp_path / "train.parquet")
    (w,) = warnings("--kb", str(folder), "--data", str(data), "--", "trainer.n_gpus_per_node=0")
    assert w["says"] == f"{data} has no column 'label', which our reward function reads"
    assert w["file"] == str(data) and w["title"] == "Our reward needs a label column" and "data.columns" in w["facts"]
    # the first plain prediction that holds is the entry's warning; the setting one holds alone here
    (w,) = warnings("--kb", str(folder), "--", "trainer.total_epochs=500")
    assert w["says"] == "trainer.total_epochs=500 is more than our cluster's job limit allows"
    assert warnings("--kb", str(folder), "--", "trainer.total_epochs=5") == []
    text = errmap("doctor", "--kb", str(folder), "--", "trainer.total_epochs=500", timeout=300).stdout.decode()
    assert "9001 Our reward needs a label column" in text and "trainer.total_epochs=500 is more" in text


@pytest.mark.parametrize("bad, line, says", [
    ("      - fact: gpu.flux_capacitor\n        op: present\n", 3, "unknown fact 'gpu.flux_capacitor'"),
    ("      - fact: gpu.count\n        op: '=~'\n        value: 1\n", 4, "Input should be '<', '<='"),
    ("      - setting: trainer.n_gpu_per_node\n        op: '>'\n        value: 1\n", 3,
     "setting 'trainer.n_gpu_per_node' is not a key of verl's PPO trainer config"),
    ("      - fact: gpu.count\n        op: '>'\n        value: 1\n        name: n\n    says: 'has {count} GPUs'\n", 2,
     "placeholder {count} is bound by no condition"),
])
def test_kb_check_names_the_file_and_line_of_a_bad_prediction(tmp_path, bad, line, says):
    tail = "" if "says:" in bad else "    says: 'something is wrong'\n"
    folder = user_kb(tmp_path, ENTRY + "predicts:\n  - when:\n" + bad + tail)
    path = folder / "9001-no-label-column.yaml"
    proc = errmap("kb", "check", "--kb", str(folder))
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 1, out
    first = ENTRY.count("\n") + 1  # the line of `predicts:`
    hit = [ln for ln in out.splitlines() if f"{path}:{first + line - 1}:" in ln]
    assert hit and says in hit[0], out


def test_kb_check_knows_the_mechanisms_and_their_cases(tmp_path):
    folder = user_kb(tmp_path, ENTRY + "predicts:\n  - mechanism: verl_batches\n    says: {indivisible: 'x y z'}\n")
    out = errmap("kb", "check", "--kb", str(folder)).stdout.decode()
    assert f"{folder / '9001-no-label-column.yaml'}:{ENTRY.count(chr(10)) + 2}:" in out and "unknown mechanism 'verl_batches'" in out
    folder = user_kb(tmp_path, ENTRY + "predicts:\n  - mechanism: misspelt_key\n    params: {cutoff: 0.9}\n"
                                       "    says: {did_you_mean: '{key} is close to {nearest}'}\n")
    out = errmap("kb", "check", "--kb", str(folder)).stdout.decode()
    assert "placeholder {nearest} is not one mechanism misspelt_key fills" in out
    folder = user_kb(tmp_path, ENTRY + "predicts:\n  - mechanism: misspelt_key\n    params: {cutoff: close}\n"
                                       "    says: {did_you_mean: '{key} is close to {close}'}\n")
    assert "params.cutoff: 'close' is not a number" in errmap("kb", "check", "--kb", str(folder)).stdout.decode()


def test_a_chinese_sidecar_must_translate_every_prediction(tmp_path):
    folder = user_kb(tmp_path, ENTRY + PREDICTS)
    (folder / "zh").mkdir()
    side = folder / "zh" / "9001-no-label-column.yaml"
    head = "title: 奖励需要 label 列\ngroup: 内部\nsummary: 奖励函数读取 label 列，而数据里没有。\ncause: 奖励函数读取 row[\"label\"]，而 parquet 文件没有这一列。\nfix:\n  - 用预处理脚本加上 label 列。\n"
    side.write_text(head, encoding="utf-8")
    out = errmap("kb", "check", "--kb", str(folder)).stdout.decode()
    assert f"{side}: no predicts" in out
    side.write_text(head + "predicts:\n  - '{file} 没有 {missing} 列'\n", encoding="utf-8")
    assert "predicts has 1 sentences, the English predictions 2" in errmap("kb", "check", "--kb", str(folder)).stdout.decode()
    side.write_text(head + "predicts:\n  - '{file} 没有我们的奖励函数读取的列 {missing}'\n  - 'trainer.total_epochs={epochs} 超过了集群的作业上限'\n",
                    encoding="utf-8")
    out = errmap("kb", "check", "--kb", str(folder)).stdout.decode()
    assert str(folder) not in out and "9001" not in out, out  # (the official KB's own check is test_kb's)
    zh = errmap("explain", "9001", "--kb", str(folder), "--lang", "zh").stdout.decode()
    assert "运行前检查（errmap doctor）" in zh and "trainer.total_epochs=<epochs> 超过了集群的作业上限" in zh


def test_explain_and_the_page_show_what_doctor_checks(kb, matcher):
    out = errmap("explain", "1009").stdout.decode()
    section = out.split("Checked before a run (errmap doctor)")[1].split("Messages it matches")[0]
    assert "gpu.capability < 8.0, actor_rollout_ref.rollout.dtype in [bfloat16, bf16]" in section
    assert "GPU compute capability <old> is below 8.0" in section
    assert "has no check for this code" in errmap("explain", "1012").stdout.decode()
    from errmap.commands.docs import errno_page

    page = errno_page(kb.entries[1035], kb, matcher, None)
    assert "## Checked before a run (errmap doctor)" in page and "<var>&lt;file&gt;</var> does not exist" in page


def _doctor(facts: dict, config: dict) -> list[str]:
    doc = Doctor(config, [], None)
    doc.facts = {n: Fact(n, v) for n, v in facts.items()}
    doc.facts["run.config"] = Fact("run.config", config)
    doc.predict()
    return [f"{w.errno} {w.says}" for w in doc.warnings]


def test_operators_of_predictions():
    # a version's major part: nvcc 12.4 builds for torch's CUDA 12.1, nvcc 11.8 does not
    assert not [w for w in _doctor({"nvcc.version": "12.4", "torch.cuda_version": "12.1"}, {}) if w.startswith("1006")]
    assert [w for w in _doctor({"nvcc.version": "11.8", "torch.cuda_version": "12.1"}, {}) if w.startswith("1006 nvcc is CUDA 11.8")]
    # a list fact: the GPUs that satisfy it are named
    (w,) = [w for w in _doctor({"gpu.capability": [8.0, 7.5, 6.1]}, {}) if w.startswith("1009")]
    assert "compute capability 7.5, 6.1 is below" in w and "bfloat16 (verl default)" in w
    # max_model_len=null is no length: the sequence length is the sum of prompt and response
    (w,) = [w for w in _doctor({}, {"actor_rollout_ref.rollout.max_model_len": "null", "data.max_prompt_length": "9000"})
            if w.startswith("1040")]
    assert "sequence length 9512 (data.max_prompt_length + data.max_response_length = 9000 + 512 (verl default))" in w


def test_exits_name_the_likely_cause_of_a_signal(tmp_path):
    assert kbmod.load().exit_causes()["SIGKILL"][0] == 1021
    folder = user_kb(tmp_path, ENTRY + "exits:\n  - signal: SIGTERM\n    says: 'our scheduler preempted the job; see its log'\n")
    proc = errmap("run", "--kb", str(folder), "--", "bash", "-c", "kill -TERM $$", timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Likely cause: 9001 our scheduler preempted the job; see its log" in err
    proc = errmap("run", "--format", "json", "--kb", str(folder), "--", "bash", "-c", "kill -TERM $$", timeout=60)
    assert json.loads(proc.stderr)["command"] == {"status": 143, "signal": "SIGTERM", "likely": 9001}


def test_verl_defaults_are_kb_data_checked_with_file_and_line(tmp_path):
    from errmap.kb.predict import read_defaults, verl_defaults

    assert verl_defaults()["trainer.n_gpus_per_node"] == "8" and verl_defaults()["data.max_prompt_length"] == "512"
    bad = tmp_path / "verl-defaults.yaml"
    bad.write_text("defaults:\n  data.max_prompt_length: 512\n  trainer.n_gpu_per_node: 8\n  data.train_files: [a, b]\n")
    found, problems = read_defaults(bad)
    assert found == {"data.max_prompt_length": "512"}
    assert problems == [f"{bad}:3: 'trainer.n_gpu_per_node' is not a key of verl's PPO trainer config",
                        f"{bad}:4: data.train_files: a default is one value"]
