"""What a scan keeps is bounded whatever the log holds, and what it leaves out it counts.

bench/scale.py measures the time and memory of the same shapes at growing sizes; these tests
assert only sizes and counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, errmap, scan_json

from errmap.report.text import SHOWN_PER_CODE
from errmap.scan.triage import KEPT_TEXT, MAX_PER_CODE, MAX_RESIDUE

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
       "GPU 0 has a total capacity of 79.11 GiB of which 1.50 GiB is free.")


def word(i: int) -> str:
    """A distinct word without digits (digits are masked when unrecognized records are grouped)."""
    return "".join("abcdefghij"[int(c)] for c in str(i))


def test_incidents_per_code_are_capped_and_counted(tmp_path):
    n = MAX_PER_CODE + 230  # distinct incidents of one code past what is kept
    p = tmp_path / "mods.log"
    p.write_text("".join(f"ModuleNotFoundError: No module named 'pkg_{word(i)}'\n" for i in range(n)))
    doc = scan_json(p)
    mods = [d for d in doc["diagnoses"] if d["errno"] == 1008]
    assert len(mods) == MAX_PER_CODE
    assert [d["captures"]["module"] for d in mods[:2]] == [f"pkg_{word(0)}", f"pkg_{word(1)}"]  # the first ones kept
    assert doc["omitted"]["diagnoses"] == [{"errno": 1008, "lines": n - MAX_PER_CODE}]
    text = errmap("scan", str(p)).stdout.decode()
    assert f"and {n - MAX_PER_CODE} more lines of 1008" in text
    assert f"… {MAX_PER_CODE - SHOWN_PER_CODE} more diagnoses of 1008 with other values" in text
    assert text.count("│ ModuleNotFoundError") == SHOWN_PER_CODE  # one evidence line per diagnosis shown


def test_repeats_of_a_kept_incident_still_count(tmp_path):
    p = tmp_path / "mods.log"
    lines = [f"ModuleNotFoundError: No module named 'pkg_{word(i)}'\n" for i in range(MAX_PER_CODE + 5)]
    p.write_text("".join(lines) + lines[0] * 7)
    doc = scan_json(p)
    first = next(d for d in doc["diagnoses"] if d["captures"].get("module") == f"pkg_{word(0)}")
    assert first["count"] == 8
    assert doc["omitted"]["diagnoses"] == [{"errno": 1008, "lines": 5}]


def test_unrecognized_records_and_long_lines_are_capped(tmp_path):
    n = MAX_RESIDUE + 40
    p = tmp_path / "big.log"
    with open(p, "w") as f:
        for i in range(n):
            f.write("ValueError: bad value " + (word(i) + " ") * (100_000 // (len(word(i)) + 1)) + "\n")
    proc = errmap("scan", "--format", "json", str(p))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert len(doc["unrecognized"]) == MAX_RESIDUE
    assert doc["omitted"]["unrecognized_lines"] == n - MAX_RESIDUE
    u = doc["unrecognized"][0]
    assert u["line"] == 1 and u["cut"] is True
    assert max(len(u["message"]), len(u["text"])) <= KEPT_TEXT + 2
    assert len(proc.stdout) < MAX_RESIDUE * 3 * (KEPT_TEXT + 500)  # was 100 KB per record and more
    text = errmap("scan", "--verbose", str(p)).stdout.decode()
    assert f"and {n - MAX_RESIDUE} more unrecognized error lines" in text


def test_a_long_matched_line_is_kept_cut(tmp_path):
    p = tmp_path / "long.log"
    p.write_text(OOM + " " + "x" * 300_000 + "\n")
    d = scan_json(p)["diagnoses"][0]
    assert d["errno"] == 1017 and d["line"] == 1
    ev = d["evidence"][0]
    assert ev["cut"] is True and len(ev["text"]) <= KEPT_TEXT + 2
    assert all(len(v) <= KEPT_TEXT + 2 for v in d["captures"].values())


def test_rank_logs_are_one_incident_listing_each_file_once(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    for i in range(300):
        (folder / f"rank{i:03d}.log").write_text(f"[rank{i}]: {OOM}\n{OOM}\n")
    doc = scan_json(folder)
    [d] = [d for d in doc["diagnoses"] if d["errno"] == 1017]
    assert d["count"] == 600 and len(d["ranks"]) == 300
    assert d["files"] == sorted(str(f) for f in folder.iterdir())
    assert doc["omitted"] == {"diagnoses": [], "unrecognized_lines": 0}


def _scan_with_peak(path, jobs: int) -> tuple[bytes, float]:
    """errmap's JSON report and the peak RSS in MB of it and its worker processes (through a wrapper process, whose
    RUSAGE_CHILDREN holds every descendant it reaped, not this test process's pages)."""
    wrapper = (
        "import resource, subprocess, sys; "
        "p = subprocess.run([sys.executable, '-m', 'errmap', 'scan', '-j', sys.argv[2], '--format', 'json', sys.argv[1]],"
        " capture_output=True); "
        "sys.stdout.buffer.write(p.stdout); "
        "sys.stderr.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, str(path), str(jobs)], capture_output=True, cwd=ROOT, timeout=600)
    return proc.stdout, int(proc.stderr.decode().strip().splitlines()[-1]) / 1024


@pytest.mark.parametrize("shape", ["long lines", "many records"])
def test_workers_send_what_a_triage_keeps(tmp_path, shape):
    # With worker processes (a file past PARALLEL_MIN, split past SPLIT_MIN) memory stays bounded as in one process,
    # and the report is the same: workers cut lines and send repeats and records past the cap by their keys.
    p = tmp_path / "big.log"
    with open(p, "w") as f:
        if shape == "long lines":  # distinct 1 MB error lines, 80 MB: split into byte ranges
            for i in range(80):
                f.write(f"RuntimeError: failure {word(i)} " + (word(i) + " ") * ((1 << 20) // (len(word(i)) + 1)) + "\n")
        else:  # distinct unrecognized records past the cap, and repeats of kept ones, 18 MB: one file per worker
            for i in range(60_000):
                f.write(f"ValueError: bad value {word(i % 45_000)} " + "x" * 300 + "\n")
    one, _ = _scan_with_peak(p, 1)
    two, peak_mb = _scan_with_peak(p, 2)
    assert json.loads(two)["unrecognized"] and two == one
    assert peak_mb < 100, f"peak RSS {peak_mb:.0f} MB"  # 197 MB and 851 MB when workers sent every event whole
