"""The docs site the docs tests build: with a user KB entry whose title and group are HTML, which
every page must show as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import errmap

HOSTILE_ENTRY = """\
errno: 9001
slug: hostile-title
title: "</title><script>window.pwned = 1</script> <b>bold</b> & co"
group: "<img src=x onerror=\\"window.pwned = 2\\"> In-house"
role: root
summary: "A summary with <i>markup</i> in it."
anchors:
  - literal: "HOSTILESRV: shard lost"
    regex: 'HOSTILESRV: shard lost'
    source: "our own server"
cause: "A cause with <u>markup</u>."
fix:
  - "Do <em>this</em>."
"""
HOSTILE_TITLE = "9001 · </title><script>window.pwned = 1</script> <b>bold</b> & co"


def needs_mkdocs() -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")


def hostile_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site built with HOSTILE_ENTRY as a user KB (--kb)."""
    needs_mkdocs()
    kb_dir = tmp_path_factory.mktemp("hostile-kb")
    (kb_dir / "9001-hostile-title.yaml").write_text(HOSTILE_ENTRY, encoding="utf-8")
    out = tmp_path_factory.mktemp("hostile-site")
    proc = errmap("docs", "build", "--kb", str(kb_dir), "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return out
