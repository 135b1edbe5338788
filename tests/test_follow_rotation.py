"""watch --follow under writers at 50k lines/s for 20 s that rotate the file every 20,000 lines the ways
logrotate and friends do: every line must be read once, every marker seen once, and the root cause
written at the worst moment found. A stopped errmap (SIGSTOP) must recover what a copytruncate left in
the copy, and warn where lines may have been missed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT

USER_KB = str(ROOT / "tests" / "data" / "userkb")
TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 49152. Reducing block sizes or `num_stages` may help."
)
STALL_WAIT = 1.5  # seconds errmap is kept stopped: longer than follow.STALL

# 50,000 lines/s in 10 ms batches; every 2000th line is a numbered marker. Every 20,000 lines the file is
# rotated in the mode given (a truncation is followed by a burst larger than the old size every other
# time); the line right after the first rotation is the root cause, so it sits exactly where lines used to
# be lost. Prints the markers, the lines written and the rotations.
WRITER = textwrap.dedent(
    """
    import os, shutil, sys, time
    path, mode, seconds, oom = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    f = open(path, "w")
    i, marker, rotations, since, t0 = 0, 0, 0, 0, time.monotonic()

    def line():
        global i, marker
        i += 1
        if i % 2000 == 0:
            marker += 1
            return f"errmap-test-marker {marker}\\n"
        return f"step {i} loss 0.{i % 9973:04d}\\n"

    while time.monotonic() - t0 < seconds:
        f.write("".join(line() for _ in range(500))); f.flush()
        since += 500
        if since >= 20000:
            since = 0
            rotations += 1
            extra = [oom + "\\n"] if rotations == 1 else []
            i += len(extra)
            if mode in ("copytruncate", "truncate"):
                if mode == "copytruncate":       # logrotate's copytruncate: a copy, then at once the truncation
                    shutil.copyfile(path, f"{path}.{rotations}")
                else:                            # truncated in place ('> file') once errmap had 0.3 s to read
                    time.sleep(0.3)
                size = f.tell()
                f.truncate(0); f.seek(0)
                n = sum(map(len, extra))
                while rotations % 2 and n <= size:  # a burst larger than the old size: past errmap's read offset
                    extra.append(line())
                    n += len(extra[-1])
                f.write("".join(extra)); f.flush()
            elif mode == "create":               # renamed; the writer keeps writing the old file a while
                os.replace(path, f"{path}.{rotations}")
                time.sleep(0.3)
                f.write("".join(extra)); f.flush()
                for _ in range(5):
                    time.sleep(0.05)
                    f.write(line()); f.flush()
                f.close(); f = open(path, "w")
            elif mode == "delete":               # deleted and created again
                f.write("".join(extra)); f.flush(); f.close()
                os.remove(path); f = open(path, "w")
        time.sleep(0.01)
    f.close()
    print(marker, i, rotations)
    """
)


def watcher(log: Path) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-m", "errmap", "watch", "--follow", str(log), "--kb", USER_KB, "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    if not log.exists():
        first = p.stderr.readline().decode()
        assert "waiting for" in first, first
    return p


def stop(p: subprocess.Popen) -> tuple[dict, str]:
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert b"Traceback" not in err, err.decode()
    return json.loads(out), err.decode()


def settle(p: subprocess.Popen, quiet: float = 2.0, limit: float = 120, log: Path | None = None) -> None:
    """Wait until errmap has read and matched everything (its reads are preads, which move no offset): `log`, when
    given, open, and every thread asleep with no CPU time spent for `quiet` seconds, however busy the machine."""
    def cpu() -> int | None:
        try:
            if log is not None and not any(os.readlink(fd) == str(log) for fd in Path(f"/proc/{p.pid}/fd").iterdir()):
                return None
            total = 0
            for task in Path(f"/proc/{p.pid}/task").iterdir():
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "S":
                    return None
                total += int(fields[11]) + int(fields[12])
            return total
        except OSError:  # a file or thread that went away while looked at
            return None

    last, since, start = cpu(), time.monotonic(), time.monotonic()
    while time.monotonic() - start < limit:
        time.sleep(0.1)
        if (now := cpu()) is None or now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise AssertionError(f"errmap was still busy after {limit} s")


def marker_counts(doc: dict) -> dict[str, int]:
    return {d["captures"]["n"]: d["count"] for d in doc["diagnoses"] if d["errno"] == 9001}


@pytest.mark.parametrize("mode", ["copytruncate", "truncate", "create", "delete"])
def test_follow_reads_every_line_under_fast_rotation(tmp_path, mode):
    log = tmp_path / "train.log"
    p = watcher(log)
    try:
        writer = subprocess.run([sys.executable, "-c", WRITER, str(log), mode, "20", TRITON],
                                capture_output=True, timeout=120)
        assert writer.returncode == 0, writer.stderr.decode()
        markers, lines, rotations = map(int, writer.stdout.split())
        print(f"{mode}: {lines} lines in 20 s, {markers} markers, {rotations} rotations")
        settle(p)
        doc, err = stop(p)
    finally:
        p.kill()
    assert rotations >= 20 and markers >= 150
    counts = marker_counts(doc)
    missing = [n for n in range(1, markers + 1) if counts.get(str(n)) != 1]
    assert not missing, f"{len(missing)} of {markers} markers missed or doubled: {missing[:10]}\n{err}"
    assert doc["sources"][0]["lines"] == lines, err
    assert 1012 in {d["errno"] for d in doc["diagnoses"]}, err
    assert "missed" not in err, err


def rotated_while_stopped(log: Path, rotate) -> tuple[dict, str]:
    """Follow `log`, stop errmap (a busy machine: no CPU for it) while `rotate()` changes the file for longer
    than follow.STALL, let it go on, and return its report once it has caught up."""
    p = watcher(log)
    try:
        settle(p, quiet=0.5, log=log)  # read to the end
        p.send_signal(signal.SIGSTOP)
        rotate()
        time.sleep(STALL_WAIT)
        p.send_signal(signal.SIGCONT)
        settle(p)
        return stop(p)
    finally:
        p.kill()


def test_a_stopped_errmap_reads_what_a_copytruncate_left_in_the_copy(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("banner\n" + "".join(f"step {i}\n" for i in range(1000)))

    def copytruncate():
        with log.open("a") as f:
            f.write("".join(f"errmap-test-marker {n}\n" for n in range(1, 4)) + TRITON + "\n")
        shutil.copyfile(log, tmp_path / "train.log.1")
        log.write_text("banner\n" + "".join(f"step {i} after\n" for i in range(2000)) + "errmap-test-marker 4\n")

    doc, err = rotated_while_stopped(log, copytruncate)
    assert set(marker_counts(doc)) == {"1", "2", "3", "4"}, err
    assert 1012 in {d["errno"] for d in doc["diagnoses"]}, err
    assert "train.log.1" in err and "truncated" in err
    assert doc["sources"][0]["lines"] == 1001 + 4 + 2002, err


@pytest.mark.parametrize("mode", ["truncated", "replaced"])
def test_a_stopped_errmap_warns_where_lines_may_have_been_missed(tmp_path, mode):
    log = tmp_path / "train.log"
    log.write_text("step 1\n")

    def rotate():
        if mode == "replaced":  # delete+recreate twice: the file in between lives only while errmap is stopped
            for n in (1, 2):
                log.unlink()
                log.write_text(f"errmap-test-marker {n}\n")
        else:  # truncated in place, without a copy, after lines errmap did not read
            with log.open("a") as f:
                f.write("errmap-test-marker 1\n")
            log.write_text("errmap-test-marker 2\n")

    doc, err = rotated_while_stopped(log, rotate)
    assert "2" in marker_counts(doc), err
    assert "did not look at it for" in err and "missed" in err, err


def test_reading_ahead_stays_in_bounded_memory(tmp_path):
    # 400 MB already there when errmap starts: it reads ahead of the scanner at most follow.BACKLOG bytes
    log = tmp_path / "big.log"
    block = "".join(f"step {i} loss 0.{i:04d} lr 1e-5\n" for i in range(10000)).encode()
    with log.open("wb") as f:
        while f.tell() < 400 << 20:
            f.write(block)
        f.write(b"errmap-test-marker 1\n")
    p = watcher(log)
    try:
        settle(p)
        peak_mb = int(next(x for x in Path(f"/proc/{p.pid}/status").read_text().splitlines()
                           if x.startswith("VmHWM")).split()[1]) / 1024
        doc, err = stop(p)
    finally:
        p.kill()
    assert marker_counts(doc) == {"1": 1}, err
    assert peak_mb < 150, peak_mb


def test_notices_speak_the_users_language(tmp_path):
    log = tmp_path / "train.log"
    p = subprocess.Popen([sys.executable, "-m", "errmap", "watch", "--follow", str(log)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "ERRMAP_LANG": "zh"})
    try:
        assert "等待" in p.stderr.readline().decode()
        log.write_text("step 1\n")
        time.sleep(1)
        log.unlink()
        log.write_text("step 2\n")
        assert "已轮转" in p.stderr.readline().decode()
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    finally:
        p.kill()
