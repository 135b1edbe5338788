"""Hostile input, second round: wide encodings, every compression, link loops, closed or full
standard streams, FIFOs, unreadable folders. Each case runs the real CLI on real files."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, errmap, scan_json

TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 49152. Reducing block sizes or `num_stages` may help."
)
BODY = "step 1\nstep 2\n" + TRITON + "\nstep 3\n"


def lines_of(doc: dict) -> list[tuple[int, int]]:
    return [(d["errno"], d["line"]) for d in doc["diagnoses"]]


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-16", "utf-32-le", "utf-32-be", "utf-32"])
def test_wide_encodings_with_and_without_bom(tmp_path, encoding):
    path = tmp_path / "w.log"
    path.write_bytes(BODY.encode(encoding))  # "utf-16"/"utf-32" write a BOM, the -le/-be forms none
    assert lines_of(scan_json(path)) == [(1012, 3)]


def test_stdin_bom_split_over_one_byte_reads():
    """The first read of a pipe can be one byte; the BOM must still be seen."""
    data = BODY.encode("utf-16")
    proc = subprocess.Popen([sys.executable, "-m", "errmap", "scan", "--format", "json", "-"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write(data[:1]); proc.stdin.flush(); time.sleep(0.3)
    proc.stdin.write(data[1:]); proc.stdin.close()
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 1, err
    assert lines_of(json.loads(out)) == [(1012, 3)]


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress),
    (".zst", None),
])
def test_every_compression_is_read(tmp_path, suffix, compress):
    path = tmp_path / ("c.log" + suffix)
    if compress is None:
        zstandard = pytest.importorskip("zstandard")
        path.write_bytes(zstandard.ZstdCompressor().compress(BODY.encode()))
    else:
        path.write_bytes(compress(BODY.encode()))
    assert lines_of(scan_json(path)) == [(1012, 3)]


def test_zstd_made_by_the_zstd_tool_with_two_frames(tmp_path):
    pytest.importorskip("zstandard")
    if not os.path.exists("/usr/bin/zstd"):
        pytest.skip("no zstd tool")
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("step 0\n" * 1000)
    b.write_text(BODY)
    out = tmp_path / "two.log.zst"
    with open(out, "wb") as f:
        for part in (a, b):
            f.write(subprocess.run(["zstd", "-q", "-c", str(part)], capture_output=True, check=True).stdout)
    assert lines_of(scan_json(out)) == [(1012, 1003)]


def test_truncated_xz_says_so(tmp_path):
    data = lzma.compress(("step\n" * 50000 + TRITON + "\n" + "step\n" * 50000).encode())
    path = tmp_path / "cut.log.xz"
    path.write_bytes(data[: len(data) * 3 // 4])
    proc = errmap("scan", str(path))
    assert b"xz data ends early" in proc.stdout


def test_archive_is_an_input_error_not_a_clean_run(tmp_path):
    import zipfile

    path = tmp_path / "logs.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("train.log", BODY)
    proc = errmap("scan", str(path))
    assert proc.returncode == 2 and b"No error found" not in proc.stdout
    assert b"zip archive" in proc.stderr + proc.stdout and b"could not be read" in proc.stdout


def _peak_rss_mb(args: list[str]) -> tuple[int, float]:
    """errmap's exit status and peak RSS, measured by a fresh wrapper process: this test process's own
    RUSAGE_CHILDREN holds the largest of every child it ever waited for, earlier tests' included."""
    wrapper = (
        "import resource, subprocess, sys; "
        "p = subprocess.run([sys.executable, '-m', 'errmap', *sys.argv[1:]], capture_output=True); "
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    rc, kib = proc.stdout.split()
    return int(rc), int(kib) / 1024


def test_gzip_bomb_inflates_in_bounded_memory(tmp_path):
    """1 GB of zeros in a ~1 MB .gz: memory stays far below what the inflated data would take."""
    path = tmp_path / "bomb.log.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        zeros = bytes(1 << 24)
        for _ in range(64):
            f.write(zeros)
        f.write(("\n" + TRITON + "\n").encode())
    rc, rss = _peak_rss_mb(["scan", "--format", "json", str(path)])
    assert rc == 1
    assert rss < 150, f"peak RSS {rss:.0f} MB"


def test_glob_over_symlink_loops_counts_each_file_once(tmp_path):
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    (logs / "a" / "train.log").write_text(BODY)
    (logs / "a" / "up").symlink_to(logs)           # two links back to the folder: a loop
    (logs / "a" / "up2").symlink_to("..")
    (logs / "again").symlink_to(logs / "a")        # and one more way to reach the same file
    doc = scan_json(str(logs) + "/**/*.log")
    assert [s["path"] for s in doc["sources"]] == [str(logs / "a" / "train.log")]
    assert lines_of(doc) == [(1012, 3)]
    doc = scan_json(logs)  # the folder itself, walked
    assert len(doc["sources"]) == 1 and lines_of(doc) == [(1012, 3)]


def test_relative_globstar_matches_like_glob(tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "top.log").write_text("ok\n")
    (tmp_path / "x" / "y" / "deep.log").write_text("ok\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "h.log").write_text("ok\n")
    proc = subprocess.run([sys.executable, "-m", "errmap", "scan", "--format", "json", "**/*.log"],
                          cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    paths = [s["path"] for s in json.loads(proc.stdout)["sources"]]
    assert paths == ["top.log", "x/y/deep.log"]


def test_deep_folder_is_walked_without_recursion(tmp_path, monkeypatch):
    d = tmp_path
    monkeypatch.chdir(tmp_path)
    for _ in range(1500):  # 3000 characters deep, still under PATH_MAX
        os.mkdir("d")
        os.chdir("d")
    with open("x.log", "w") as f:
        f.write(BODY)
    try:
        doc = scan_json(d)
    finally:  # pytest's own cleanup recurses: empty the tower from the bottom up
        os.remove("x.log")
        for _ in range(1500):
            os.chdir("..")
            os.rmdir("d")
    assert lines_of(doc) == [(1012, 3)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_unreadable_subfolder_is_named_and_exit_2(tmp_path):
    (tmp_path / "ok.log").write_text(BODY)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x.log").write_text("x\n")
    locked.chmod(0)
    try:
        proc = errmap("scan", str(tmp_path))
    finally:
        locked.chmod(0o755)
    assert proc.returncode == 2
    assert str(locked).encode() in proc.stderr + proc.stdout and b"permission denied" in proc.stderr + proc.stdout
    assert b"1012" in proc.stdout  # what could be read is still diagnosed


def test_closed_stdin_is_an_input_error():
    for cmd in (["scan", "-"], ["watch"]):
        proc = subprocess.run([sys.executable, "-m", "errmap", *cmd], cwd=ROOT, stdin=subprocess.DEVNULL,
                              capture_output=True, preexec_fn=lambda: os.close(0), timeout=60)
        assert b"Traceback" not in proc.stderr, proc.stderr.decode()
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and b"stdin is closed" in out and b"No error found" not in out, (cmd, out)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_stdout_to_dev_full(tmp_path, fmt):
    (tmp_path / "t.log").write_text(BODY)
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([sys.executable, "-m", "errmap", "scan", "--format", fmt, str(tmp_path / "t.log")],
                              cwd=ROOT, stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert b"Traceback" not in proc.stderr and b"Exception ignored" not in proc.stderr, proc.stderr.decode()
    assert proc.returncode == 2 and b"no space left on device" in proc.stderr.lower()
    assert len(proc.stderr.strip().splitlines()) == 1


def test_follow_on_a_fifo_reads_it_as_a_stream(tmp_path):
    fifo = tmp_path / "live.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "errmap", "watch", "--follow", str(fifo), "--format", "json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(fifo, "w") as w:
        w.write(BODY)
    out, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err and b"Illegal seek" not in err, err.decode()
    assert lines_of(json.loads(out)) == [(1012, 3)]


def test_scan_of_a_fifo(tmp_path):
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "errmap", "scan", "--format", "json", str(fifo)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(fifo, "wb") as w:
        w.write(BODY.encode("utf-16"))  # the BOM is seen on a stream too
    out, err = proc.communicate(timeout=60)
    assert lines_of(json.loads(out)) == [(1012, 3)], err


def test_ctrl_c_during_scan_exits_130(tmp_path):
    fifo = tmp_path / "slow.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "errmap", "scan", str(fifo)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w = open(fifo, "w")
    w.write("step 1\n"); w.flush()
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    w.close()
    assert b"Traceback" not in err and b"Aborted!" not in err
    assert proc.returncode == 130 and b"interrupted" in err


def test_compressed_data_on_stdin_is_refused_not_clean(tmp_path):
    proc = errmap("scan", "-", input=gzip.compress(BODY.encode()))
    assert proc.returncode == 2 and b"decompress it first" in proc.stdout + proc.stderr
    assert b"No error found" not in proc.stdout


def test_data_fifo_and_huge_config_are_not_read(tmp_path):
    from errmap.probes.base import Context
    from errmap.probes.running import run

    fifo = tmp_path / "train.parquet"
    os.mkfifo(fifo)  # opening it would wait for a writer that never comes
    assert run("data.file", Context(data=str(fifo))).value["regular"] is False
    assert "not a regular file" in run("data.columns", Context(data=str(fifo))).reason
    model = tmp_path / "model"
    model.mkdir()
    with open(model / "config.json", "wb") as f:  # sparse: 100 MB on paper, nothing on disk
        f.truncate(100 << 20)
    fact = run("model.vocab", Context(model=str(model)))
    assert fact.value is None and "not read" in fact.reason


def test_kb_cache_keeps_a_bounded_number_of_states(tmp_path):
    cache = tmp_path / "cache"
    for i in range(12):  # twelve different user KB states, one cache file each before pruning
        kbdir = tmp_path / f"kb{i}"
        kbdir.mkdir()
        (kbdir / "9001-test-marker.yaml").write_text(
            (ROOT / "tests" / "data" / "userkb" / "9001-test-marker.yaml").read_text() + f"# state {i}\n")
        proc = errmap("explain", "9001", env={"ERRMAP_CACHE_DIR": str(cache), "ERRMAP_KB_PATH": str(kbdir)})
        assert proc.returncode == 0, proc.stderr
    assert 1 <= len(list(cache.glob("kb-*.json"))) <= 8


def test_checkpoint_probe_never_lists_an_arbitrary_folder(tmp_path):
    from errmap.probes.base import Context
    from errmap.probes.running import run

    private = tmp_path / "home"
    (private / ".ssh").mkdir(parents=True)
    (private / ".ssh" / "id_ed25519").write_text("secret\n")
    (private / "notes.txt").write_text("x\n")
    (private / "model.safetensors").write_bytes(b"x")
    v = run("ckpt.files", Context(captures={"path": str(private / "missing.pt")})).value
    assert v["exists"] and v["named_present"] is False and v["files"] == 1
    assert not any(name in json.dumps(v) for name in ("model.safetensors", "notes.txt", ".ssh", "id_ed25519"))
