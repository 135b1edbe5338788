"""A hostile user KB (--kb, ERRMAP_KB_PATH): a clear file:line problem, bounded memory, no stall."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap

from conftest import ROOT, errmap

ENTRY = textwrap.dedent("""\
    errno: {errno}
    slug: {slug}
    title: A user entry
    group: Tests
    role: root
    summary: A user entry of the hostile KB tests.
    anchors:
      - literal: "{literal}"
        regex: '{regex}'
        source: tests of this project
    cause: a user pattern.
    fix: ["Nothing."]
    links:
      - url: https://example.org/errmap-tests
        kind: docs
        title: Test entry
    """)
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(9)
) + "errno: 9300\n"


def entry(folder, errno, slug, literal="user-marker", regex="^user-marker (?P<n>\\d+)$"):
    (folder / f"{errno}-{slug}.yaml").write_text(ENTRY.format(errno=errno, slug=slug, literal=literal, regex=regex))


def kb_folder(tmp_path):
    """An empty user KB folder."""
    kb = tmp_path / "kb"
    kb.mkdir()
    return kb


def failed_check(kb, run=errmap) -> str:
    """What `errmap kb check` says of a user KB with problems (it exits 1)."""
    proc = run("kb", "check", "--kb", str(kb))
    assert proc.returncode == 1, proc.stdout.decode()
    return proc.stdout.decode()


def bounded(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI with its address space capped at 1.5 GB: an exponential expansion fails, not the machine."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    proc = subprocess.run([sys.executable, "-m", "errmap", *args], capture_output=True, cwd=ROOT, timeout=120,
                          preexec_fn=cap, env={**os.environ, "COLUMNS": "200", **(env or {})})
    assert b"Traceback (most recent call last)" not in proc.stderr + proc.stdout, proc.stderr.decode()
    return proc


def test_billion_laughs_is_refused_with_file_and_line(tmp_path):
    kb = kb_folder(tmp_path)
    (kb / "9300-laughs.yaml").write_text(LAUGHS)
    entry(kb, 9301, "fine")
    log = tmp_path / "run.log"
    log.write_text("user-marker 7\n")
    proc = bounded("scan", "--format", "json", "--kb", str(kb), str(log), env={"ERRMAP_CACHE_DIR": str(tmp_path / "c")})
    assert proc.returncode == 1
    assert f"{kb / '9300-laughs.yaml'}:2: YAML aliases (*a) are not allowed" in proc.stderr.decode()
    assert b'"errno": 9301' in proc.stdout  # the other user entry still works
    check = bounded("kb", "check", env={"ERRMAP_KB_PATH": str(kb)})
    assert check.returncode == 1 and b"9300-laughs.yaml:2: YAML aliases" in check.stdout


def test_recursive_alias_links_and_odd_files_are_problems_not_tracebacks(tmp_path):
    kb = kb_folder(tmp_path)
    (kb / "9310-loop.yaml").write_text("errno: 9310\nanchors: &x [*x]\n")
    (kb / "9311-dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (kb / "9312-self.yaml").symlink_to(kb / "9312-self.yaml")
    os.mkfifo(kb / "9313-fifo.yaml")  # reading it would block for good
    (kb / "9314-huge.yaml").write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    (kb / "9315-binary.yaml").write_bytes(b"\xff\xfe\x00bad")
    (kb / "9316-deep.yaml").write_text("errno: " + "[" * 20000 + "]" * 20000 + "\n")
    entry(kb, 9317, "fine")
    out = failed_check(kb, bounded)
    for name, problem in [("9310-loop", ":2: YAML aliases (*x)"), ("9311-dangling", ":1: cannot read"),
                          ("9312-self", ":1: cannot read"), ("9313-fifo", ":1: not a regular file"),
                          ("9314-huge", ":1: larger than 1024 KB"), ("9315-binary", ":1: cannot read"),
                          ("9316-deep", ":1:")]:
        assert f"{kb / name}.yaml{problem}" in out, (name, out)
    assert "9317" not in out
    scan = bounded("scan", "--kb", str(kb), str(ROOT / "fixtures" / "clean"), env={"ERRMAP_CACHE_DIR": str(tmp_path / "c")})
    assert scan.returncode == 0 and b"9311-dangling.yaml:1: cannot read" in scan.stderr


def test_catastrophic_regex_is_found_by_check_and_switched_off_at_run_time(tmp_path):
    kb = kb_folder(tmp_path)
    entry(kb, 9320, "laughing-regex", literal="cccc", regex="(b|b)+ cccc")
    assert "9320-laughing-regex: anchor 1 backtracks catastrophically" in failed_check(kb)
    log = tmp_path / "run.log"
    log.write_text("".join("b" * (30 + i % 7) + "! cccc\n" for i in range(400)) + "user-marker 1\n")
    entry(kb, 9321, "fine")
    scan = errmap("scan", "--format", "json", "--kb", str(kb), str(log), env={"ERRMAP_CACHE_DIR": str(tmp_path / "c")})
    err = scan.stderr.decode()
    assert "anchor 1 of 9320 (laughing-regex) took over 0.25s on 3 lines" in err and "off for the rest of this run" in err
    assert err.count("laughing-regex") == 1
    assert b'"errno": 9321' in scan.stdout and scan.returncode == 1


def test_quadratic_regex_is_found_by_check(tmp_path):
    kb = kb_folder(tmp_path)
    # every '>' is a place a message may start, and [^\s:]+ runs to the end of the line from each
    entry(kb, 9330, "quadratic", literal="Zapped", regex="^(?:Zapped|[^\\s:]+: (?P<pid>\\d+) Zapped +(?P<command>\\S.*))$")
    out = failed_check(kb)  # slow, or past the time-out on a loaded machine: a problem either way
    assert "9330-quadratic: anchor 1 is slow on adversarial input" in out or "9330-quadratic: anchor 1 backtracks" in out
