"""Both stage-one engines give identical results on every fixture."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
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
