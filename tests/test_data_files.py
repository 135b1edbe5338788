"""Data files: `--data` probes without `--probe`, JSON lines files are read, doctor checks every file."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import FIXTURES, errmap

LOG = FIXTURES / "1033" / "verl-rl-dataset-prompt-key-any-name.log"  # KeyError on the prompt key 'instruction'


def diagnosis_1033(*args: str) -> dict:
    proc = errmap("scan", "--format", "json", *args, str(LOG))
    assert proc.returncode == 1, proc.stderr
    return next(d for d in json.loads(proc.stdout)["diagnoses"] if d["errno"] == 1033)


def test_data_without_probe_probes_a_json_lines_file(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "1+1", "data_source": "gsm8k"}\n{"question": "2+2", "data_source": "math"}\n')
    d = diagnosis_1033("--data", str(data))
    assert d["captures"]["column"] == "instruction"
    assert d["verdict"] == "confirmed"
    assert d["facts"]["data.columns"] == {"value": {"question": "string", "data_source": "string"},
                                          "via": "pyarrow schema (JSON lines)"}


def test_parquet_still_probed_and_refutes(tmp_path):
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table({"instruction": ["hi"], "data_source": ["gsm8k"]}), data)
    d = diagnosis_1033("--data", str(data))
    assert d["verdict"] == "refuted" and "instruction" in d["facts"]["data.columns"]["value"]


def test_a_json_array_says_why_it_cannot_be_read(tmp_path):
    data = tmp_path / "train.json"
    data.write_text('[{"question": "1+1"}, {"question": "2+2"}]\n')
    d = diagnosis_1033("--data", str(data))
    assert d["verdict"] == "unverified"
    why = d["facts"]["data.columns"]["unknown"]
    assert why.startswith(f"not a readable JSON lines file: {data}") and "one object per line, not one JSON array" in why


def test_text_report_shows_the_verdict_without_probe_flag(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "1+1"}\n')
    out = errmap("scan", "--data", str(data), str(LOG)).stdout.decode()
    assert "confirmed" in out and "the data file has no such column" in out


def test_doctor_checks_every_train_and_val_file(tmp_path):
    good = tmp_path / "a.parquet"
    pq.write_table(pa.table({"data_source": ["gsm8k"], "prompt": [[{"role": "user", "content": "hi"}]],
                             "reward_model": [{"ground_truth": "1"}]}), good)
    lfs = tmp_path / "b.parquet"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    missing = tmp_path / "val.parquet"
    proc = errmap("doctor", "--format", "json", "--", f"data.train_files=['{good}', '{lfs}']",
                  f"data.val_files=[{missing}]", timeout=300)
    doc = json.loads(proc.stdout)
    assert list(doc["data"]) == [str(good), str(lfs), str(missing)]
    says = {w["file"]: w["says"] for w in doc["warnings"] if w["errno"] == 1035}
    assert says == {str(lfs): f"{lfs} is a git-lfs pointer, not the data (run git lfs pull)",
                    str(missing): f"{missing} does not exist"}
    assert not [w for w in doc["warnings"] if w.get("file") == str(good)]
