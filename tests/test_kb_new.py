"""`errmap kb new`: a real failure no entry knows (a real program's JSONDecodeError), drafted into a KB of your own
from the scan report's FILE:LINE, then diagnosed by scan with the new code; a pasted line, the healthy logs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import FIXTURES, errmap

TRAIN = """\
import json
import sys

print("loading run config", flush=True)
for step in range(3):
    print(f"step {step} loss {0.5 / (step + 1):.3f}", flush=True)
with open(sys.argv[1]) as f:
    config = json.load(f)
"""


def failed_run(folder, config: str):
    """Run the program on a config it cannot read; its output, as a log."""
    (folder / "train.py").write_text(TRAIN)
    (folder / "config.json").write_text(config)
    log = folder / "train.log"
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "train.py", "config.json"], cwd=folder, stdout=out, stderr=subprocess.STDOUT)
    assert proc.returncode == 1
    return log


@pytest.fixture(scope="module")
def drafted(tmp_path_factory):
    """The log of a real failed run, the scan that does not know it, and `kb new` on the line that scan names."""
    folder = tmp_path_factory.mktemp("run")
    log = failed_run(folder, '{"lr": 1e-5,\n "epochs": 3,\n}\n')
    before = errmap("scan", str(log))
    kb = folder / "my-kb"
    teach = next(line.strip() for line in before.stdout.decode().splitlines() if "teach errmap:" in line)
    where = teach.split("errmap kb new ")[1]
    made = errmap("kb", "new", "--kb", str(kb), where)
    return log, before, kb, made


def test_the_report_says_how_to_teach_errmap(drafted):
    log, before, _kb, _made = drafted
    text = before.stdout.decode()
    assert before.returncode == 1 and "Errors not in the knowledge base (1)" in text
    lineno = log.read_text().splitlines().index(next(x for x in log.read_text().splitlines() if "JSONDecodeError" in x)) + 1
    assert f"teach errmap: errmap kb new {log}:{lineno}" in " ".join(text.split())


def test_kb_new_drafts_an_entry_that_kb_check_accepts(drafted):
    log, _before, kb, made = drafted
    out = " ".join(made.stdout.decode().split())
    assert made.returncode == 0, made.stderr.decode()
    assert "Drafted 9000 jsondecode-error-expecting-property" in out and "kb check: knowledge base OK" in out
    (entry,) = kb.glob("9000-*.yaml")
    doc = yaml.safe_load(entry.read_text())
    assert (doc["errno"], doc["role"], doc["cause"], doc["fix"]) == (9000, "root", "", [])
    (anchor,) = doc["anchors"]
    assert anchor["literal"] == "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line"
    assert anchor["regex"].count("(?P<number") == 3 and "27" not in anchor["regex"]  # line, column, char generalised
    (fixture,) = (kb / "fixtures" / "9000").glob("*.log")
    assert fixture.read_text() == log.read_text()  # the whole short log: the lines around the failure


def test_scan_then_diagnoses_it_with_the_new_code_whatever_its_numbers(drafted, tmp_path):
    log, _before, kb, _made = drafted
    doc = json.loads(errmap("scan", "--format", "json", "--kb", str(kb), str(log)).stdout)
    assert [d["errno"] for d in doc["diagnoses"]] == [9000] and doc["unrecognized"] == []
    assert doc["diagnoses"][0]["captures"] == {"number": "3", "number_2": "1", "number_3": "27"}
    text = " ".join(errmap("scan", "--kb", str(kb), str(log)).stdout.decode().split())
    assert text.startswith("1 diagnosis") and "Cause not written yet: your entry leaves it empty" in text
    other = failed_run(tmp_path, '{"lr": 1e-5, "warmup": 10,}\n')  # the same failure at another place
    doc = json.loads(errmap("scan", "--format", "json", str(other), env={"ERRMAP_KB_PATH": str(kb)}).stdout)
    assert [d["errno"] for d in doc["diagnoses"]] == [9000]


def test_a_pasted_line_read_as_scan_reads_it_takes_the_next_code(drafted):
    _log, _before, kb, _made = drafted
    line = "(TrainWorker pid=4242, ip=10.0.0.7) zipfile.BadZipFile: File is not a zip file"
    made = errmap("kb", "new", "--out", str(kb), input=line.encode())
    assert made.returncode == 0 and "Drafted 9001 bad-zip-file-file-is-not-a-zip-file" in made.stdout.decode()
    (entry,) = kb.glob("9001-*.yaml")
    assert yaml.safe_load(entry.read_text())["anchors"][0]["regex"] == r"^zipfile\.BadZipFile: File is not a zip file"


def test_an_anchor_that_matches_a_healthy_log_is_refused(tmp_path):
    healthy = (FIXTURES / "clean" / "config-trl-grpo-batch-fits.log").read_text().splitlines()[4]
    made = errmap("kb", "new", "--out", str(tmp_path / "kb"), "--line", healthy)
    err = made.stderr.decode()
    assert made.returncode == 2 and "also matches a healthy log" in err and err.count("\n") == 1
    assert not list((tmp_path / "kb").glob("*.yaml"))
    nowhere = errmap("kb", "new", "--line", "ZorgError: the flux capacitor broke", env={"ERRMAP_KB_PATH": ""})
    assert nowhere.returncode == 2 and "--out DIR or --kb DIR" in nowhere.stderr.decode()
