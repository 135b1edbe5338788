"""Hostile streams, folders and signals, on real files, FIFOs, processes and signals: a FIFO put where a followed
log was, a path that is or becomes a folder, a followed file passed through, SIGTERM and SIGHUP while workers
scan, a user's anchor that is slow on every line, and decompression bombs."""

from __future__ import annotations

import bz2
import errno
import json
import lzma
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

TRITON = b"triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 49152."
BF16 = (b"RuntimeError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        b"Your Tesla P40 GPU has compute capability 6.1.")
ENV = {**os.environ, "COLUMNS": "120", "ERRMAP_LANG": "en"}
START = 30  # seconds errmap may take to load its KB and start on a busy machine
SOON = 5  # seconds anything else may take


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "errmap", *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_until(stream, want: bytes, seconds: float = SOON) -> bytes:
    """What the pipe gives until `want` is in it; fails after `seconds` (a hung errmap fails the test, never hangs it)."""
    seen, end = b"", time.monotonic() + seconds
    while want not in seen:
        ready, _, _ = select.select([stream], [], [], max(0.0, end - time.monotonic()))
        assert ready, f"no {want!r} within {seconds} s; got {seen[-500:]!r}"
        data = os.read(stream.fileno(), 1 << 16)
        assert data, f"the stream ended before {want!r}; got {seen[-500:]!r}"
        seen += data
    return seen


def finish(p: subprocess.Popen, sig: int | None = None) -> tuple[bytes, bytes]:
    """Send `sig`, then errmap's remaining output and status (killed if it does not end within SOON s)."""
    if sig is not None:
        p.send_signal(sig)
    try:
        return p.communicate(timeout=SOON)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"errmap did not end within {SOON} s of the signal; stderr: {err[-500:]!r}") from None


def following(p: subprocess.Popen, path: Path, seconds: float = START) -> None:
    """Wait until errmap holds `path` open (how a test knows `watch --follow` has started, in any format)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if any(os.readlink(f"/proc/{p.pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{p.pid}/fd")):
                return
        except OSError:
            pass
        assert p.poll() is None, p.communicate()[1][-500:]
        time.sleep(0.05)
    raise AssertionError(f"errmap did not open {path} within {seconds} s")


# --- watch --follow ------------------------------------------------------------------------------------------------

def test_follow_reads_on_when_a_fifo_replaces_the_log_and_sigterm_still_ends_it(tmp_path):
    log = tmp_path / "train.log"
    writer = open(log, "wb", buffering=0)
    writer.write(b"step 1\n" + TRITON + b"\n")
    p = start("watch", "--follow", str(log))
    try:
        read_until(p.stdout, b"1012", START)
        log.rename(tmp_path / "train.log.1")
        os.mkfifo(log)  # no writer ever opens it: an open() for reading would wait forever
        time.sleep(0.5)  # errmap has looked at the path again
        writer.write(BF16 + b"\n")  # the writer is still on the rotated file
        read_until(p.stdout, b"1009")
        out, err = finish(p, signal.SIGTERM)
    finally:
        writer.close()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143 and b"Traceback" not in err, err
    assert b"errmap summary" in out and b"3 lines" in out
    assert b"not a regular file" in err


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_follow_of_a_folder_is_an_error_in_the_machine_format(tmp_path, fmt):
    p = start("watch", "--follow", str(tmp_path), "--format", fmt)
    out, err = finish(p)
    assert p.returncode == 2 and b"is a directory" in err
    if fmt == "json":
        assert json.loads(out)["sources"] == [{"path": str(tmp_path), "bytes": 0, "lines": 0, "error": "is a directory"}]
    else:
        assert [json.loads(line) for line in out.splitlines()] == [{"error": {"path": str(tmp_path), "reason": "is a directory"}}]


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_followed_file_that_becomes_a_folder_is_an_error_in_the_machine_format(tmp_path, fmt):
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1\n" + TRITON + b"\n")
    p = start("watch", "--follow", str(log), "--format", fmt)
    try:
        following(p, log)
        log.unlink()
        log.mkdir()
        out, err = finish(p)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 2 and b"is a directory" in err
    if fmt == "json":
        doc = json.loads(out)
        assert doc["sources"] == [{"path": str(log), "bytes": len(TRITON) + 8, "lines": 2, "error": "is a directory"}]
        assert [d["errno"] for d in doc["diagnoses"]] == [1012]
    else:
        docs = [json.loads(line) for line in out.splitlines()]
        assert docs[0]["errno"] == 1012 and docs[-1] == {"error": {"path": str(log), "reason": "is a directory"}}


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_followed_file_that_cannot_be_read_is_an_error_in_the_machine_format(fmt):
    """A process's memory file is a regular file whose first bytes cannot be read (or opened, where ptrace is
    restricted), whoever errmap runs as."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        mem = f"/proc/{sleeper.pid}/mem"
        out, err = finish(start("watch", "--follow", mem, "--format", fmt))
    finally:
        sleeper.kill()
        sleeper.wait()
    reason = err.decode().strip().rsplit(": ", 1)[-1]
    assert reason and err.decode().startswith(f"errmap: {mem}: ")
    if fmt == "json":
        assert json.loads(out)["sources"][0] | {"bytes": 0} == {"path": mem, "bytes": 0, "lines": 0, "error": reason}
    else:
        assert [json.loads(line) for line in out.splitlines()] == [{"error": {"path": mem, "reason": reason}}]


def test_follow_passthrough_echoes_the_followed_lines(tmp_path):
    log = tmp_path / "train.log"
    first = b"step 1\r\nloss 0.1\n" + TRITON + b"\n"
    log.write_bytes(first)
    p = start("watch", "--follow", str(log), "--passthrough")
    try:
        assert read_until(p.stdout, TRITON + b"\n", START) == first
        with open(log, "ab") as f:
            f.write(b"step 2\n" + BF16)  # the last line has no newline yet
        more = read_until(p.stdout, BF16)
        out, err = finish(p, signal.SIGINT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130 and first + more + out == log.read_bytes()
    assert b"1012" in err and b"1009" in err and b"errmap summary" in err


# --- scan -j N and signals ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def large_log(tmp_path_factory) -> Path:
    """A plain log over parallel.PARALLEL_MIN: `scan -j 2` forks its workers for it."""
    path = tmp_path_factory.mktemp("large") / "big.log"
    line = b"step 1 loss 0.1234 lr 0.0001 tokens/s 12345\n"
    path.write_bytes(line * ((17 << 20) // len(line)))
    return path


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_during_parallel_scan_leaves_no_worker(tmp_path, large_log, sig):
    fifo = tmp_path / "live.fifo"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "errmap", "scan", "-j", "2", str(large_log), str(fifo)],
                         cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    writer, workers = None, []
    try:
        end = time.monotonic() + START
        while writer is None:  # a worker opens the FIFO: the pool is there; it waits in its read
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno == errno.ENXIO and time.monotonic() < end and p.poll() is None
                time.sleep(0.05)
        workers = _children(p.pid)
        assert workers
        p.send_signal(sig)
        p.wait(timeout=SOON)
        assert p.returncode == -sig
        end = time.monotonic() + SOON
        while any(map(_alive, workers)) and time.monotonic() < end:
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)], "a worker outlived errmap"
    finally:
        if writer is not None:
            os.close(writer)
        for pid in [p.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        p.wait()


# --- a user's slow anchor -----------------------------------------------------------------------------------------

SLOW_ENTRY = """\
errno: 9002
slug: slow-marker
title: Slow marker line
group: Tests
role: root
summary: A marker line matched by a pattern that backtracks on long runs of one letter.
anchors:
  - literal: "slowmark"
    regex: 'slowmark (a+)+$'
    source: tests of this project
cause: A slow marker line was written.
fix: ["Nothing to fix: this entry exists for the tests."]
"""


def test_user_anchor_slow_on_every_line_is_switched_off_over_its_budget(tmp_path):
    """Each line costs the anchor tens of milliseconds, under the per-line limit: 150 of them would take seconds."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "9002-slow-marker.yaml").write_text(SLOW_ENTRY)
    log = tmp_path / "slow.log"
    log.write_bytes(b"".join(b"slowmark " + b"a" * 2000 + b"!\n" for _ in range(150)) + TRITON + b"\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "errmap", "scan", "--kb", str(kb), "--format", "json", str(log)],
                       cwd=ROOT, env=ENV, capture_output=True, timeout=120)
    assert p.returncode == 1 and b"Traceback" not in p.stderr, p.stderr
    notices = [line for line in p.stderr.decode().splitlines() if "budget" in line]
    assert len(notices) == 1 and "anchor 1 of 9002-slow-marker" in notices[0] and "off for the rest" in notices[0]
    assert [d["errno"] for d in json.loads(p.stdout)["diagnoses"]] == [1012]
    assert time.monotonic() - t0 < 60


# --- decompression bombs ------------------------------------------------------------------------------------------

def _peak_rss_mb(args: list[str]) -> tuple[int, float]:
    """errmap's exit status and peak RSS, from a fresh wrapper process (RUSAGE_CHILDREN of this one holds every child's)."""
    wrapper = ("import resource, subprocess, sys; "
               "p = subprocess.run([sys.executable, '-m', 'errmap', *sys.argv[1:]], capture_output=True); "
               "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    proc = subprocess.run([sys.executable, "-c", wrapper, *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=300)
    rc, kib = proc.stdout.split()
    return int(rc), int(kib) / 1024


def _zstd(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor(level=3).compress(data)


@pytest.mark.parametrize("ext, compress", [
    ("bz2", lambda b: bz2.compress(b, 9)), ("xz", lambda b: lzma.compress(b, preset=1)), ("zst", _zstd)],
    ids=["bz2", "xz", "zst"])
def test_bomb_inflates_in_bounded_memory(tmp_path, ext, compress):
    """256 MiB of zeros in a few KB (streams of 16 MiB, one after another, as each format allows), then a failure."""
    one = compress(bytes(16 << 20))
    path = tmp_path / f"bomb.log.{ext}"
    path.write_bytes(one * 16 + compress(b"\n" + TRITON + b"\n"))
    rc, rss = _peak_rss_mb(["scan", "--format", "json", str(path)])
    assert rc == 1
    assert rss < 150, f"peak RSS {rss:.0f} MB"
