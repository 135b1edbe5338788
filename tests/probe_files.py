"""Real files for the probe tests: verl-style parquets written with pyarrow and tiny model folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def verl_parquet(path: Path, sources: tuple[str, ...] = ("openai/gsm8k",)) -> Path:
    """verl's RL layout: data_source, prompt (a list of chat messages), ability, reward_model, extra_info."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = len(sources) * 2
    table = pa.table({
        "data_source": [sources[i % len(sources)] for i in range(rows)],
        "prompt": [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(rows)],
        "ability": ["math"] * rows,
        "reward_model": [{"style": "rule", "ground_truth": str(2 * i)} for i in range(rows)],
        "extra_info": [{"split": "train", "index": i} for i in range(rows)],
    })
    pq.write_table(table, path)
    return path


def preference_parquet(path: Path) -> Path:
    """A preference layout (prompt/chosen/rejected as plain strings): not what verl's RL trainer reads."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"prompt": ["2+2?", "3+3?"], "chosen": ["4", "6"], "rejected": ["5", "7"]}), path)
    return path


def raw_gsm8k_parquet(path: Path) -> Path:
    """The raw question/answer columns, before verl's preprocessing script."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"question": ["2+2?"], "answer": ["#### 4"]}), path)
    return path


def model_dir(path: Path, vocab: int = 8, model_vocab: int = 16, chat_template: bool = True, config: bool = True) -> Path:
    """A tiny model folder written by hand: config.json, tokenizer.json, tokenizer_config.json."""
    path.mkdir(parents=True, exist_ok=True)
    if config:
        (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                                      "vocab_size": model_vocab, "hidden_size": 8}))
    words = {f"t{i}": i for i in range(vocab - 1)}
    (path / "tokenizer.json").write_text(json.dumps({
        "version": "1.0",
        "model": {"type": "BPE", "vocab": words, "merges": []},
        "added_tokens": [{"id": vocab - 1, "content": "<|endoftext|>", "special": True}],
    }))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}
    if chat_template:
        cfg["chat_template"] = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return path
