"""bench/accuracy.py on tiny corpora of both layouts, built from the fixtures, scanned by the real errmap."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import FIXTURES, ROOT

SCRIPT = ROOT / "bench" / "accuracy.py"
OOM = FIXTURES / "1017" / "gpu-training-loop-backward.log"  # errmap: 1017
OOM2 = FIXTURES / "1017" / "kubectl-prefix.log"  # errmap: 1017
MODULE = FIXTURES / "1008" / "torchrun-liger-kernel-missing.log"  # errmap: 1008, then 1031
CHILD = FIXTURES / "1031" / "torchrun-rank-exit-code-3.log"  # errmap: 1031 (a consequence) and an unrecognized error
ROOTED = FIXTURES / "1031" / "torchrun-rank-module-not-found.log"  # errmap: 1008 (a root), 1031, an unrecognized error
CLEAN = FIXTURES / "clean" / "config-trl-grpo-batch-fits.log"  # errmap: nothing
# no code covers it: errmap shows it as unrecognized
ZERO_DIV = ('Traceback (most recent call last):\n  File "m.py", line 3, in <module>\n    x = 1 / 0\n'
            "ZeroDivisionError: division by zero\n")


def accuracy(*args: str | Path) -> subprocess.CompletedProcess:
    errmap = shlex.join([sys.executable, "-m", "errmap"])
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args), "--errmap", errmap, "--jobs", "2"],
                          capture_output=True, text=True, timeout=120)


def corpus(root: Path, logs: dict[str, Path | str]) -> None:
    """Writes each log (a fixture to copy, or text) under root."""
    for name, log in logs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(log, Path):
            shutil.copy(log, root / name)
        else:
            (root / name).write_text(log)


def test_both_layouts(tmp_path: Path) -> None:
    yaml_root, gpualert_root = tmp_path / "yaml", tmp_path / "gpualert"
    corpus(yaml_root, {"logs/oom.log": OOM, "logs/oom2.log": OOM2, "logs/clean.log": CLEAN,
                       "logs/div.log": ZERO_DIV, "logs/module.log": MODULE,
                       "logs/child.log": CHILD, "logs/rooted.log": ROOTED})
    rows = [("logs/oom.log", 1017), ("logs/oom2.log", 1008),  # mislabelled: a miss
            ("logs/clean.log", "none"), ("logs/div.log", "out-of-catalog"),
            ("logs/module.log", "undeterminable"),  # skipped
            ("logs/module.log", 1031),  # errmap's second code, not its first: a miss
            ("logs/clean.log", 1045),  # a failed run errmap finds nothing in
            ("logs/clean.log", "out-of-catalog"),  # nothing unrecognized either: a miss
            ("logs/oom.log", "none"),  # a healthy log diagnosed
            ("logs/child.log", "out-of-catalog", [1031]),  # a consequence the label lists: right
            ("logs/child.log", "out-of-catalog", []),  # one it does not: a miss
            ("logs/rooted.log", "out-of-catalog", [1008]),  # a root code, listed or not: a miss
            ("logs/absent.log", 1017)]  # errmap exits 2: a crash
    (yaml_root / "labels.yaml").write_text(yaml.safe_dump([{"file": f, "root": r, "also": also[0] if also else [],
                                                            "key_line": "", "difficulty": "easy"} for f, r, *also in rows]))
    corpus(gpualert_root, {"corpus/a.log": OOM, "corpus/b.log": OOM2, "corpus/c.log": ZERO_DIV,
                           "corpus/d.log": MODULE, "corpus/e.log": OOM})
    modes = [("a", "cuda_oom"), ("b", "nan_loss"),  # mislabelled: a miss
             ("c", "div_zero"), ("d", "missing_module"),
             ("e", "file_not_found")]  # out of catalog but diagnosed: a miss
    (gpualert_root / "corpus" / "labels.jsonl").write_text("".join(
        json.dumps({"id": i, "mode": m, "source": "injected", "log_path": f"corpus/{i}.log"}) + "\n" for i, m in modes))

    p = accuracy(yaml_root, gpualert_root, "--json", tmp_path / "out.json", "--verbose")
    assert p.returncode == 1, p.stderr  # a crash
    doc = json.loads((tmp_path / "out.json").read_text())
    yml, gpa = doc["corpora"]
    assert (yml["layout"], yml["skipped"], gpa["layout"]) == ("labels.yaml", 1, "gpualert")
    figures = ("pos", "hit", "neg", "fp", "ooc", "ooc_ok", "failed", "silent", "crash")
    assert {k: yml[k] for k in figures} == dict(pos=5, hit=1, neg=2, fp=1, ooc=5, ooc_ok=2, failed=10, silent=2, crash=1)
    assert yml["per_label"] == {"1017": [1, 2], "1008": [0, 1], "1031": [0, 1], "1045": [0, 1], "none": [1, 2],
                                "out-of-catalog": [2, 5]}
    assert sorted((m["file"], m["got"]) for m in yml["misses"]) == [
        ("logs/absent.log", "crash"), ("logs/child.log", "1031"), ("logs/clean.log", "none"), ("logs/clean.log", "none"),
        ("logs/module.log", "1008"), ("logs/oom.log", "1017"), ("logs/oom2.log", "1017"), ("logs/rooted.log", "1008")]
    assert {k: gpa[k] for k in figures} == dict(pos=3, hit=2, neg=0, fp=0, ooc=2, ooc_ok=1, failed=5, silent=0, crash=0)
    assert gpa["per_code"] == {"1017": [1, 1], "1045": [0, 1], "1008": [1, 1]}
    assert gpa["per_label"]["file_not_found"] == [0, 1]
    assert doc["total"]["hit"] == 3 and doc["total"]["pos"] == 8
    last = p.stdout.splitlines()[-1]
    assert last == doc["total"]["summary"]
    assert re.fullmatch(r"root cause right 3/8 = 37\.5%; healthy logs diagnosed 1/2; out-of-catalog failures shown as "
                        r"unrecognized 3/7; failed runs said 'No error found' 2/15; crashes 1", last)
    assert "nan_loss -> 1017 ['1017'], unrecognized no: 1" in p.stdout  # --verbose lists the misses


def test_unknown_class_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "labels.jsonl").write_text(json.dumps({"id": "x", "mode": "gremlins", "log_path": "x.log"}))
    p = accuracy(tmp_path)
    assert p.returncode == 2 and "gremlins" in p.stderr
