"""doctor checks a data file by the rules of the run's own trainer (kb/datasets.yaml, read from each trainer's source):
the file types it loads (1035) and its dataset formats (1033), on real files read by the real probes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from errmap.commands.doctor import Doctor, trainer
from errmap.kb import load as kbmod

from conftest import errmap
from probe_files import preference_parquet, raw_gsm8k_parquet, verl_parquet


def jsonl(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def warned(stack: str, data: Path, config: dict | None = None) -> dict[int, str]:
    """errno -> what doctor says of `data` for `stack`, its data probes run as doctor runs them (the machine's are not)."""
    doc = Doctor(config or {}, [str(data)], None, stack=stack)
    doc.data_facts = {str(data): {}}
    doc.probing = True  # each fact a prediction reads is probed from the file
    doc.predict(kbmod.load())
    return {w.errno: w.says for w in doc.warnings if w.about == str(data)}


def test_json_lines_data_is_no_parquet_warning_when_no_trainer_is_named(tmp_path):
    data = jsonl(tmp_path / "train.jsonl", {"prompt": "2+2?", "completion": "4"})
    proc = errmap("doctor", "--format", "json", "--data", str(data), timeout=300)
    doc = json.loads(proc.stdout)
    assert doc["stack"] is None and doc["data"][str(data)]["data.file"]["value"]["format"] == "json"
    assert not [w for w in doc["warnings"] if w["errno"] in (1033, 1035)], doc["warnings"]


def test_trl_formats(tmp_path):
    pytest.importorskip("pyarrow")
    assert warned("trl", jsonl(tmp_path / "plain.jsonl", {"prompt": "2+2?"})) == {}  # a standard prompt: no chat needed
    assert warned("trl", jsonl(tmp_path / "grpo.jsonl", {"prompt": [{"role": "user", "content": "2+2?"}]})) == {}
    assert warned("trl", jsonl(tmp_path / "sft.jsonl", {"messages": [{"role": "user", "content": "hi"}]})) == {}
    assert warned("trl", preference_parquet(tmp_path / "dpo.parquet")) == {}
    says = warned("trl", jsonl(tmp_path / "qa.jsonl", {"question": "2+2?", "answer": "4"}))
    assert says == {1033: f"{tmp_path / 'qa.jsonl'} fits none of TRL's dataset formats (columns: question, answer); it reads "
                          "GRPO prompts: prompt; SFT language modeling: text; SFT conversational: messages; SFT "
                          "prompt-completion: prompt, completion; DPO preference: chosen, rejected"}


def test_verl_reads_parquet_and_json_by_its_prompt_key(tmp_path):
    pytest.importorskip("pyarrow")
    assert warned("verl", verl_parquet(tmp_path / "rl.parquet")) == {}
    lines = jsonl(tmp_path / "rl.jsonl", {"prompt": [{"role": "user", "content": "2+2?"}], "data_source": "gsm8k",
                                          "reward_model": {"ground_truth": "4"}})
    assert warned("verl", lines) == {1035: f"verl does not load {lines}: it reads .parquet, .json files"}
    plain = jsonl(tmp_path / "plain.json", {"prompt": "2+2?", "data_source": "gsm8k", "reward_model": {"ground_truth": "4"}})
    assert warned("verl", plain) == {1034: f"{plain}: column 'prompt' is string, not a list of {{role, content}} chat messages"}
    raw = raw_gsm8k_parquet(tmp_path / "raw.parquet")
    assert "RL prompts: question, data_source, reward_model" in warned("verl", raw, {"data.prompt_key": "question"})[1033]


def test_openrlhf_input_key(tmp_path):
    pytest.importorskip("pyarrow")
    qa = jsonl(tmp_path / "qa.jsonl", {"question": "2+2?", "answer": "4"})
    assert warned("openrlhf", qa, {"data.input_key": "question"}) == {}
    assert "prompts or SFT inputs: input; DPO or reward-model preference: chosen, rejected" in warned("openrlhf", qa)[1033]


def test_llamafactory_formats_and_its_dataset_info(tmp_path):
    pytest.importorskip("pyarrow")
    assert warned("llamafactory", jsonl(tmp_path / "alpaca.jsonl", {"instruction": "2+2?", "input": "", "output": "4"})) == {}
    qa = jsonl(tmp_path / "qa.jsonl", {"question": "2+2?", "answer": "4"})
    assert "alpaca: instruction, output" in warned("llamafactory", qa)[1033]
    info = tmp_path / "dataset_info.json"
    info.write_text(json.dumps({"qa": {"file_name": "qa.jsonl", "columns": {"prompt": "question", "response": "answer"}}}))
    assert warned("llamafactory", qa) == {}
    info.write_text(json.dumps({"qa": {"file_name": "qa.jsonl", "formatting": "sharegpt"}}))
    assert warned("llamafactory", qa)[1033].endswith("it reads sharegpt: conversations")


def test_the_trainer_comes_from_the_flag_or_verl_overrides():
    assert trainer({}, "trl") == ("trl", "--stack")
    assert trainer({"actor_rollout_ref.rollout.n": "4"}) == ("verl", "the overrides")
