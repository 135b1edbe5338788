"""Both stage-one engines give identical results on every fixture."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, errmap
from errmap import kb as kbmod
from errmap.matcher import Matcher, scan_chunks

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
    got = m.scanner("f")._scan(block)
    assert [(e.line.lineno, e.line.text) for e in got] == [(2, "KeyError: 'x'")]


@pytest.mark.parametrize("engine", ["ahocorasick", "hyperscan"])
def test_version_names_the_engine(engine):
    if engine == "hyperscan":
        pytest.importorskip("hyperscan")
    out = errmap("--version", env={"ERRMAP_PREFILTER": engine}).stdout.decode()
    assert out.strip().endswith(f"(stage one: {engine})"), out


def test_hyperscan_database_is_cached_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch):
    pytest.importorskip("hyperscan")
    from errmap import prefilter

    monkeypatch.setenv("ERRMAP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ERRMAP_PREFILTER", "hyperscan")
    data = b"".join(p.read_bytes() + b"\n" for p in LOGS[:40])
    fresh = Matcher(kbmod.load())
    [db] = tmp_path.glob("hs-*.db")
    assert prefilter._cached(fresh.literals) is not None
    cached = Matcher(kbmod.load())
    assert list(cached.prefilter.hits(data)) == list(fresh.prefilter.hits(data))
    db.write_bytes(b"not a database")
    assert prefilter._cached(fresh.literals) is None
    assert list(Matcher(kbmod.load()).prefilter.hits(data)) == list(fresh.prefilter.hits(data))
