from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A suite started with SIGINT ignored (`nohup pytest &`) would pass that on to every process it starts: errmap and the
# commands under test must take a Ctrl-C as they do for a user, so they start with SIGINT's default action.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
FIXTURES = ROOT / "fixtures"
CATALOG = ROOT.parent / "shared" / "catalog.yaml"


def errmap(*args: str, input: bytes | None = None, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, as a user runs it; whatever it is given, it never shows a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "errmap", *args],
        input=input, capture_output=True, timeout=timeout, cwd=ROOT,
        env={**os.environ, "COLUMNS": "120", "ERRMAP_LANG": "en", **(env or {})},  # English unless a test asks
    )
    assert b"Traceback (most recent call last)" not in proc.stderr, proc.stderr.decode(errors="replace")
    return proc


def scan_json(*paths: str | Path, env: dict | None = None) -> dict:
    proc = errmap("scan", "--format", "json", *map(str, paths), env=env)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def kb():
    from errmap.kb import load as kbmod

    return kbmod.load()


@pytest.fixture(scope="session")
def matcher(kb):
    from errmap.scan.matcher import Matcher

    return Matcher(kb)
