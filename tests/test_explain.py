"""`errmap explain` and `errmap list`: a code, a slug, a pasted message or log line; your own KB entries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES, errmap
from errmap.commands.explain import lookup, start_of_message
from errmap.commands.sections import find_example

USER_ENTRY = """\
errno: 9001
slug: my-shard-lost
title: Our shard server lost a shard
group: In-house
role: root
summary: The shard server of our cluster dropped a shard while the job read it.
anchors:
  - literal: "SHARDSRV: lost shard"
    regex: 'SHARDSRV: lost shard (?P<n>\\d+)'
    source: "our shard server's log format"
cause: Shard {n} was dropped by the shard server.
fix:
  - Restart the shard server and resume from the last checkpoint.
"""


@pytest.fixture()
def user_kb(tmp_path: Path) -> Path:
    folder = tmp_path / "mykb"
    folder.mkdir()
    (folder / "9001-my-shard-lost.yaml").write_text(USER_ENTRY, encoding="utf-8")
    return folder


def test_every_codes_example_line_explains_that_code(kb, matcher):
    """The line errmap's matcher marks in each code's example log, pasted whole, finds the code."""
    seen = 0
    for e in kb:
        example = find_example(e, matcher, FIXTURES)
        if example is None:
            continue
        line = dict(example.lines)[example.marked]
        found = lookup(line, kb, matcher)
        assert found.how == "message" and e in (found.entry, *found.others), (e.errno, line, found.entry and found.entry.errno)
        seen += 1
    assert seen >= len(kb) - 2


def test_explain_a_pasted_message():
    proc = errmap("explain", "CUDA error: no kernel image is available for execution on the device")
    assert proc.returncode == 0
    assert proc.stdout.decode().startswith("1001 ")
    assert "matches 1001 no-kernel-image" in proc.stderr.decode()


def test_explain_a_message_pasted_cut_short(kb):
    proc = errmap("explain", "CUDA error: no kernel image is available")
    assert proc.returncode == 0 and proc.stdout.decode().startswith("1001 ")
    assert "the start of a message of 1001 no-kernel-image" in proc.stderr.decode()
    # any literal cut after a few words, behind a prefix, names an entry holding a literal that starts so
    checked = 0
    for e in kb:
        for lit in (lit for a in e.anchors for lit in a.literals if len(lit) >= 40):
            cut = lit[: lit.rfind(" ", 20, 36)] if lit.rfind(" ", 20, 36) > 0 else ""
            if cut:
                found = start_of_message("[rank0]: " + cut, kb)
                assert found is not None and any(x.startswith(cut) for a in found.anchors for x in a.literals), (e.errno, cut)
                checked += 1
    assert checked > 50


def test_explain_a_whole_log_line_with_its_prefix():
    line = "(WorkerDict pid=7, ip=10.0.0.2) [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"
    proc = errmap("explain", "--format", "json", line)
    assert proc.returncode == 0 and json.loads(proc.stdout)["errno"] == 1017


def test_explain_a_few_words_finds_the_closest_entry():
    proc = errmap("explain", "kernel image missing")
    assert proc.returncode == 0 and proc.stdout.decode().startswith("1001 ")
    assert "closest by its words is 1001" in proc.stderr.decode()


@pytest.mark.parametrize("query,code", [("爆显存", 1017), ("断点续训", 1046), ("找不到prompt列", 1033)])
def test_what_chinese_users_write_finds_its_code(query, code):
    """The words a code's Chinese sidecar lists under `search` (and its Chinese title) name it, as on the site."""
    proc = errmap("explain", "--format", "json", query)
    assert proc.returncode == 0 and json.loads(proc.stdout)["errno"] == code, proc.stderr.decode()


def test_a_slug_written_with_spaces_is_that_code():
    for query in ("nccl error", "No Kernel Image"):
        proc = errmap("explain", "--format", "json", query)
        assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert json.loads(errmap("explain", "--format", "json", "nccl error").stdout)["errno"] == 1026


@pytest.mark.parametrize("query,codes", [
    ("NCCL", {1025, 1026, 1027, 1028}),  # every code its slug names, none that only mentions NCCL
    ("nccl", {1025, 1026, 1027, 1028}),
    ("vllm", {1018, 1019, 1020, 1023, 1040, 1047}),  # codes about vLLM's engine; three of them
])
def test_a_name_suggests_the_codes_about_it(query, codes):
    proc = errmap("explain", query)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "did you mean" in err, err
    suggested = {int(code) for code in re.findall(r"\b(1\d{3}) ", err.split("did you mean")[1])}
    assert suggested <= codes and len(suggested) >= min(3, len(codes)), err
    if query.lower() == "nccl":
        assert suggested == codes, err


def test_a_pasted_line_is_read_as_scan_reads_it():
    """Ray's prefix (and ANSI colour around it) comes off as scan takes it off, before the words are weighed."""
    words = "watchdog caught collective operation timeout"
    bare = errmap("explain", "--format", "json", words)
    for pasted in (f"(RayWorker pid=123, ip=10.0.0.1) {words}", f"\x1b[36m(RayWorker pid=123, ip=10.0.0.1)\x1b[0m {words}"):
        proc = errmap("explain", "--format", "json", pasted)
        assert proc.returncode == 0 and json.loads(proc.stdout)["errno"] == 1025, proc.stderr
        assert proc.stderr == bare.stderr


@pytest.mark.parametrize("query,hint", [("cuda-om", "did you mean 1017 cuda-oom"), ("oom", "1021 host-oom"),
                                        ("no-kernel-imag", "did you mean 1001 no-kernel-image")])
def test_a_near_miss_suggests_the_closest(query, hint):
    proc = errmap("explain", query)
    assert proc.returncode == 2 and not proc.stdout
    err = proc.stderr.decode()
    assert hint in err and err.count("\n") == 1, err


def test_an_unknown_code_or_text_says_so():
    proc = errmap("explain", "1049")
    assert proc.returncode == 2 and "no code 1049" in proc.stderr.decode()
    proc = errmap("explain", "zzzz qqqq")
    assert proc.returncode == 2 and "errmap list" in proc.stderr.decode()


def test_explain_and_list_read_your_own_entries(user_kb, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 3\nSHARDSRV: lost shard 17\n", encoding="utf-8")
    scanned = errmap("scan", "--kb", str(user_kb), str(log))
    assert scanned.returncode == 1 and "errmap explain 9001" in scanned.stdout.decode()
    for how, env in ((["--kb", str(user_kb)], None), ([], {"ERRMAP_KB_PATH": str(user_kb)})):
        proc = errmap("explain", *how, "9001", env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        out = proc.stdout.decode()
        assert out.startswith("9001 Our shard server lost a shard") and "None recorded." in out
        assert errmap("explain", *how, "SHARDSRV: lost shard 4", env=env).stdout == proc.stdout
        listed = errmap("list", *how, env=env)
        assert "9001  my-shard-lost" in listed.stdout.decode()
        assert any(e["errno"] == 9001 for e in json.loads(errmap("list", "--format", "json", *how, env=env).stdout))
    assert errmap("explain", "9001").returncode == 2
    assert errmap("kb", "check", "--kb", str(user_kb)).returncode == 0


def test_an_official_entry_needs_a_link(tmp_path):
    from errmap.kb import load as kbmod
    from errmap.kb import files as kbfiles

    text = USER_ENTRY.replace("9001", "1001").replace("my-shard-lost", "no-kernel-image")
    path = tmp_path / "1001-no-kernel-image.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(kbfiles.KBError) as info:
        kbmod.load_entry(path)
    assert info.value.problems == [f"{path}:1: links: an errmap code needs at least one upstream link "
                                   "(your own entries, 9000-9999, may have none)"]
