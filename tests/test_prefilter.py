"""The stage-one engines: named, cached, linear on a long line."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, errmap
from errmap.kb import load as kbmod
from errmap.scan.matcher import Matcher
from errmap.scan.scanner import Scanner, scan_chunks

LOGS = sorted(FIXTURES.rglob("*.log"))


def events(monkeypatch, engine: str, data: bytes):
    monkeypatch.setenv("ERRMAP_PREFILTER", engine)
    m = Matcher(kbmod.load())
    assert m.prefilter.name == engine
    return [
        (type(e).__name__, e.line.lineno, e.line.text, getattr(getattr(e, "entry", None), "errno", None))
        for e in scan_chunks(m, "f", [data[i : i + 4096] for i in range(0, len(data), 4096)])
    ]


def test_hyperscan_and_aho_corasick_agree_on_all_fixtures(monkeypatch):
    pytest.importorskip("hyperscan", reason="the hyperscan extra is not installed")
    data = b"".join(p.read_bytes() + b"\n" for p in LOGS)
    assert LOGS
    assert events(monkeypatch, "hyperscan", data) == events(monkeypatch, "ahocorasick", data)


def test_hits_on_one_long_line_full_of_hits():
    """Each hit's line is found from the previous hit's line: a 1 MB line of 'Error' words gives
    every hit on its one line, and the line after it is still its own line."""
    m = Matcher(kbmod.load())
    block = b"Error " * 170_000 + b"\nKeyError: 'x'\n"
    got = Scanner(m, "f")._scan(block, len(block))
    assert [(e.line.lineno, e.line.text) for e in got] == [(2, "KeyError: 'x'")]


@pytest.mark.parametrize("engine, name", [("ahocorasick", "ahocorasick"), ("hyperscan", "hyperscan, with anchor supersets"),
                                          ("hyperscan-literals", "hyperscan"), ("none", "none")])
def test_version_names_the_engine(engine, name):
    if engine.startswith("hyperscan"):
        pytest.importorskip("hyperscan")
    out = errmap("--version", env={"ERRMAP_PREFILTER": engine}).stdout.decode()
    assert out.strip().endswith(f"(stage one: {name})"), out


@pytest.mark.parametrize("engine", ["hyperscan-literals", "hyperscan"])
def test_hyperscan_database_is_cached_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch, engine):
    pytest.importorskip("hyperscan")
    monkeypatch.setenv("ERRMAP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ERRMAP_PREFILTER", engine)
    data = b"".join(p.read_bytes() + b"\n" for p in LOGS[:40])
    fresh = Matcher(kbmod.load())
    dbs = sorted(tmp_path.glob("hs-*.db"), key=lambda p: p.stat().st_size)
    assert len(dbs) == (1 if engine == "hyperscan-literals" else 2)  # the literals' and the patterns'
    assert len(list(tmp_path.glob("supersets-*.json"))) == (engine == "hyperscan")
    cached = Matcher(kbmod.load())
    assert list(cached.prefilter.hits(data)) == list(fresh.prefilter.hits(data))
    for db in dbs:
        db.write_bytes(b"not a database")
    for table in tmp_path.glob("supersets-*.json"):
        table.write_text("{not json")
    rebuilt = Matcher(kbmod.load())
    assert list(rebuilt.prefilter.hits(data)) == list(fresh.prefilter.hits(data))
    assert rebuilt.superset_ids == fresh.superset_ids
    if engine == "hyperscan":
        assert list(rebuilt.supersets.hits(data)) == list(fresh.supersets.hits(data))
        assert list(cached.supersets.hits(data)) == list(fresh.supersets.hits(data))
