"""Several worker processes give the report of one: byte ranges of a big file and files spread over workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from errmap.scan import parallel as scanmod
from errmap.scan.matcher import Matcher
from errmap.scan.source import CHUNK, expand

from conftest import FIXTURES


def _report(matcher: Matcher, paths: list[Path], jobs: int) -> str:
    found = expand([str(p) for p in paths])
    return json.dumps(scanmod.scan(matcher, found.sources, found.errors, jobs).to_json(), indent=1)


@pytest.fixture(scope="module")
def matcher(kb):
    return Matcher(kb)


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    """Every fixture log, one after another, until the file spans many read chunks: tracebacks,
    frames and multi-line failures fall across the range boundaries. It ends inside a traceback,
    without a final newline."""
    logs = sorted(p for p in FIXTURES.rglob("*.log"))
    data = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in logs)
    path = tmp_path_factory.mktemp("big") / "train.log"
    with open(path, "wb") as f:
        written = 0
        while written < 7 * CHUNK:
            f.write(data)
            written += len(data)
        f.write(b'Traceback (most recent call last):\n  File "train.py", line 3, in <module>')
    return path


@pytest.mark.parametrize("jobs", [2, 3])
def test_byte_ranges_give_the_serial_report(matcher, big_log, monkeypatch, jobs):
    monkeypatch.setattr(scanmod, "SPLIT_MIN", 2 * CHUNK)
    monkeypatch.setattr(scanmod, "PARALLEL_MIN", 0)
    serial = _report(matcher, [big_log], 1)
    ranges = scanmod._ranges(str(big_log), big_log.stat().st_size, 4 * jobs)
    assert len(ranges) > jobs  # the file really is split, each range after the first with a lead-in
    assert all(lead < start for _, lead, start, _, _ in ranges[1:])
    parallel = _report(matcher, [big_log], jobs)
    assert json.loads(serial)["diagnoses"]  # a report with something in it
    assert parallel == serial


def test_many_files_over_workers_give_the_serial_report(matcher, big_log, monkeypatch):
    monkeypatch.setattr(scanmod, "PARALLEL_MIN", 0)
    paths = [FIXTURES, big_log]
    assert _report(matcher, paths, 2) == _report(matcher, paths, 1)


def test_encoded_files_are_never_split(tmp_path):
    gz = tmp_path / "a.log"
    gz.write_bytes(b"\x1f\x8b" + b"x" * 100)
    utf16 = tmp_path / "b.log"
    utf16.write_bytes("step 1\n".encode("utf-16"))
    plain = tmp_path / "c.log"
    plain.write_bytes(b"step 1\n")
    assert [scanmod._plain_size(str(p)) for p in (gz, utf16, plain)] == [None, None, 7]
