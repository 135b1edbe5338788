"""Terminal escapes in a log never reach the terminal: text output strips them, JSON escapes them."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import urllib.parse

import regex

from conftest import ROOT, errmap

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
       "GPU 0 has a total capacity of 79.11 GiB of which 1.50 GiB is free.")
# Sequences a terminal acts on: reset (ESC c), a line-drawing character set (ESC ( 0, then SO),
# C1 CSI (U+009B) clearing the screen, an OSC title, an OSC 8 link, DCS, BEL, backspace, C1 RI.
HOSTILE = ["\x1bc", "\x1b(0", "\x0e", "\u009b2J", "\x1b]0;owned\x07", "\x1b]8;;http://e.x/\x1b\\", "\x1bPq#0\x1b\\",
           "\x07", "\x08", "\u008d", "\x1b[2J", "\x1b"]
LOG = "".join(
    [f"step {i} {h}ok\n" for i, h in enumerate(HOSTILE)]
    + [f"{HOSTILE[0]}{HOSTILE[3]}{OOM}{HOSTILE[4]}\n",
       f"ValueError: bad{HOSTILE[1]}{HOSTILE[2]} shard{HOSTILE[5]} {HOSTILE[6]}{HOSTILE[9]}end\n"]
)
# Everything but tab and newline among C0, DEL and C1, and ESC itself.
CONTROL = regex.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def write_log(tmp_path, name="run.log"):
    p = tmp_path / name
    p.write_bytes(LOG.encode())
    return p


def test_text_output_has_no_control_character(tmp_path):
    p = write_log(tmp_path, "run\x1b]0;x\x07.log")  # the file name too
    for args in (["scan"], ["scan", "--verbose"], ["scan", "--format", "github"]):
        proc = errmap(*args, str(p))
        out = proc.stdout.decode()
        assert proc.returncode == 1, proc.stderr
        assert not CONTROL.search(out), (args, [m for m in CONTROL.findall(out)])
        assert "1017" in out
    assert "ValueError: bad shard end" in errmap("scan", "--verbose", str(p)).stdout.decode()


def test_json_keeps_the_text_and_escapes_every_control(tmp_path):
    p = write_log(tmp_path, "run\u009b.log")
    for fmt in ("json", "sarif", "jsonl"):
        out = errmap("scan", "--format", fmt, str(p)).stdout.decode()
        assert not CONTROL.search(out), fmt
        # the path, its C1 character escaped (in SARIF's URIs, percent-encoded), not lost
        path = "file://" + urllib.parse.quote(str(p)) if fmt == "sarif" else str(p)
        for doc in (json.loads(x) for x in (out.splitlines() if fmt == "jsonl" else [out])):
            assert path in json.dumps(doc, ensure_ascii=False)
    doc = json.loads(errmap("scan", "--format", "json", str(p)).stdout)
    [d] = doc["diagnoses"]
    assert d["errno"] == 1017 and d["line"] == len(HOSTILE) + 1
    assert d["evidence"][0]["text"] == OOM
    [u] = doc["unrecognized"]
    assert u["text"] == "ValueError: bad\x0e shard end"  # sequences are gone, a lone control is data


def test_watch_on_a_pty_prints_no_escape_from_the_log(tmp_path):
    """On a terminal rich colours its own output; nothing of the log's sequences may pass."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "errmap", "watch"], stdin=subprocess.PIPE, stdout=slave,
                            stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    proc.communicate(LOG.encode(), timeout=120)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert b"CUDA out of memory" in out
    own = regex.sub(rb"\x1b\[[0-9;]*m", b"", out)  # rich's own colours (SGR) are all it may send
    assert not regex.search(rb"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]", own), own


def test_an_unterminated_control_string_ends_at_its_line():
    from errmap.scan.lines import ANSI, printable

    # an OSC title that a killed process never closed takes the rest of its line, not the lines after it
    data = b"step 1 \x1b]0;training\nValueError: bad shard\n\x1b[31mred\x1b[0m\n"
    assert ANSI.sub(b"", data) == b"step 1 \nValueError: bad shard\nred\n"
    assert printable(data.decode()) == "step 1 \nValueError: bad shard\nred\n"
