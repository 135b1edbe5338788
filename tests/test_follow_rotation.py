"""watch --follow under writers at 50k lines/s that rotate the file the three ways logrotate and
friends do; every marker line, and the root cause written at the worst moment, must be seen once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT

USER_KB = str(ROOT / "tests" / "data" / "userkb")
TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 49152. Reducing block sizes or `num_stages` may help."
)

# Writes `seconds` of 50,000 lines/s in 10 ms batches; every 500th line is a numbered marker.
# Each 20,000 lines the file is rotated in the mode given; the line right after a rotation is the OOM
# the first time, so the root cause is exactly where lines used to be lost.
WRITER = textwrap.dedent(
    """
    import os, sys, time
    path, mode, seconds, oom = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    f = open(path, "w")
    i, marker, rotations, t0 = 0, 0, 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        batch = []
        for _ in range(500):
            i += 1
            if i % 500 == 0:
                marker += 1
                batch.append(f"errmap-test-marker {marker}\\n")
            else:
                batch.append(f"step {i} loss 0.{i % 9973:04d}\\n")
        f.write("".join(batch)); f.flush()
        if i % 20000 == 0:
            rotations += 1
            extra = (oom + "\\n") if rotations == 1 else ""
            if mode == "copytruncate":           # copy, truncate, then a burst larger than the old size
                time.sleep(0.3)
                size = f.tell()
                f.truncate(0); f.seek(0)
                burst, n = [], 0
                while n <= size:
                    i += 1
                    burst.append(f"step {i} after truncation\\n")
                    n += len(burst[-1])
                f.write(extra + "".join(burst)); f.flush()
            elif mode == "create":               # renamed; the writer keeps writing the old file a while
                os.replace(path, path + f".{rotations}")
                time.sleep(0.3)                  # errmap has seen the rename by now
                f.write(extra); f.flush()
                for _ in range(5):
                    time.sleep(0.05)
                    i += 1
                    f.write(f"step {i} still in the renamed file\\n"); f.flush()
                f.close(); f = open(path, "w")
            elif mode == "delete":               # deleted and created again
                f.write(extra); f.flush(); f.close()
                os.remove(path); f = open(path, "w")
        time.sleep(0.01)
    f.close()
    print(marker, i)
    """
)


@pytest.mark.parametrize("mode", ["copytruncate", "create", "delete"])
def test_follow_loses_no_line_under_fast_rotation(tmp_path, mode):
    log = tmp_path / "train.log"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "errmap", "watch", "--follow", str(log), "--kb", USER_KB, "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    try:
        first = watcher.stderr.readline().decode()
        assert "waiting for" in first, first
        writer = subprocess.run([sys.executable, "-c", WRITER, str(log), mode, "6", TRITON],
                                capture_output=True, timeout=120)
        assert writer.returncode == 0, writer.stderr.decode()
        markers, lines = map(int, writer.stdout.split())
        print(f"{mode}: {lines} lines in 6 s, {markers} markers")
        time.sleep(3)
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
    assert b"Traceback" not in err, err.decode()
    doc = json.loads(out)
    counts = {d["captures"]["n"]: d["count"] for d in doc["diagnoses"] if d["errno"] == 9001}
    missing = [n for n in range(1, markers + 1) if counts.get(str(n)) != 1]
    assert markers > 100 and not missing, f"{len(missing)} of {markers} markers missed or doubled: {missing[:10]}"
    assert 1012 in {d["errno"] for d in doc["diagnoses"]}, err.decode()
