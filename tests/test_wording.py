"""The text report's counts and headers say what happened, in the right number (real CLI runs)."""

from __future__ import annotations

from conftest import errmap


def test_one_line_is_singular(tmp_path):
    log = tmp_path / "one.log"
    log.write_text("step 1 loss 0.5\n")
    proc = errmap("scan", str(log))
    assert proc.returncode == 0 and "No error found (1 file, 1 line)" in proc.stdout.decode(), proc.stdout


def test_only_unknown_errors_is_not_zero_diagnoses(tmp_path):
    log = tmp_path / "unk.log"
    log.write_text('Traceback (most recent call last):\n  File "a.py", line 1, in <module>\nFooError: bar\n')
    proc = errmap("scan", str(log))
    out = proc.stdout.decode()
    assert proc.returncode == 1 and "0 diagnoses" not in out and "root cause first" not in out, out
    assert out.startswith("No known cause for 1 error (1 file, 3 lines)") and "FooError: bar" in out, out


def test_a_missing_file_says_what_failed_never_no_error(tmp_path):
    proc = errmap("scan", str(tmp_path / "nonexist.log"))
    text = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 2 and "No error found" not in text, text
    assert "nonexist.log: no such file or directory" in text and "1 input could not be read" in text, text
    assert "input(s)" not in text and "0 lines" not in text, text


def test_a_missing_file_beside_a_healthy_one(tmp_path):
    ok = tmp_path / "ok.log"
    ok.write_text("a\nb\n")
    proc = errmap("scan", str(tmp_path / "nonexist.log"), str(ok))
    text = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 2 and "No error found" not in text
    assert "1 input could not be read (1 file, 2 lines read)" in text, text


def test_a_missing_file_in_chinese(tmp_path):
    ok = tmp_path / "ok.log"
    ok.write_text("a\nb\n")
    proc = errmap("scan", "--lang", "zh", str(tmp_path / "nonexist.log"), str(ok), env={"COLUMNS": "200"})
    text = proc.stdout.decode()
    assert proc.returncode == 2 and "nonexist.log：没有那个文件或目录" in text, text
    assert "没有诊断结果：1 个输入无法读取（已读取 1 个文件，2 行）" in text, text
    assert not any(w in text for w in ("such", "could not", "read)")), text


def test_watch_on_a_terminal_names_whole_commands(tmp_path):
    import os
    import pty
    import subprocess
    import sys

    from conftest import ROOT

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "60", "ERRMAP_LANG": "en"}
    proc = subprocess.Popen([sys.executable, "-m", "errmap", "watch"], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=env)
    os.close(slave)
    os.write(master, b"\x04")  # Ctrl-D: the end of what this terminal gives
    _, err = proc.communicate(timeout=120)
    os.close(master)
    lines = err.decode().splitlines()
    assert proc.returncode == 0 and all(len(line) <= 60 for line in lines), lines
    for command in ("`python train.py 2>&1 | errmap watch`", "`--follow FILE`", "`errmap run -- CMD`"):
        assert any(command in line for line in lines), lines
