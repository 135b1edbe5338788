"""The streaming matcher: line splitting, numbering, prefixes, chunk independence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from errmap.kb import load as kbmod
from errmap.kb.model import Anchor
from errmap.scan.lines import peel
from errmap.scan.matcher import MAX_LINE, Matcher
from errmap.scan.events import Match, Unrecognized
from errmap.scan.scanner import Scanner, scan_chunks

USER_KB = Path(__file__).parent / "data" / "userkb"


@pytest.fixture(scope="module")
def m() -> Matcher:
    return Matcher(kbmod.load([USER_KB]))


def events(m: Matcher, data: bytes, chunk: int = 1 << 20):
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""]
    return list(scan_chunks(m, "t.log", chunks))


def markers(evs) -> list[tuple[int, str]]:
    return [(e.line.lineno, e.captures["n"]) for e in evs if isinstance(e, Match) and e.entry.errno == 9001]


def test_line_numbers_count_newlines_only(m):
    data = b"a\nerrmap-test-marker 1\r\nb\rerrmap-test-marker 2\n\nerrmap-test-marker 3"
    assert markers(events(m, data)) == [(2, "1"), (3, "2"), (5, "3")]


def test_ansi_and_prefixes_are_peeled(m):
    data = b"\x1b[36m(WorkerDict pid=77, ip=10.1.2.3)\x1b[0m [rank5]:errmap-test-marker 4 [repeated 3x across cluster]\n"
    (e,) = events(m, data)
    assert (e.line.actor, e.line.pid, e.line.host, e.line.rank, e.line.repeat) == ("WorkerDict", 77, "10.1.2.3", 5, 3)
    assert e.captures == {"n": "4"}


def test_the_level_does_not_decide_what_a_failure_is(m):
    data = b"WARNING 05-09 17:35:49 [x.py:1] errmap-test-marker 1\nERROR 05-09 17:35:49 [x.py:1] errmap-test-marker 2\n"
    assert markers(events(m, data)) == [(1, "1"), (2, "2")]
    # an exception no anchor knows, logged at WARNING, was handled: not an unrecognized failure
    assert events(m, b"WARNING 05-09 17:35:49 [x.py:1] MyCustomError: retrying\n") == []


def test_invalid_utf8_and_nul_bytes(m):
    data = b"\xff\xfe\x00garbage\x00\nerrmap-test-marker 9\n\x80\x81\n"
    assert markers(events(m, data)) == [(2, "9")]


def test_huge_line_is_cut_and_matching_continues(m):
    data = b"errmap-test-marker 1" + b"x" * (MAX_LINE * 3) + b"\nerrmap-test-marker 2\n"
    evs = events(m, data, chunk=1 << 16)
    # the cut line keeps its start (the marker regex wants the whole line, so only the second matches)
    assert markers(evs) == [(2, "2")]


def test_unrecognized_exception_lines(m):
    data = b"Traceback (most recent call last):\n  File \"x.py\", line 1\nMyCustomError: it broke\n"
    (e,) = events(m, data)
    assert isinstance(e, Unrecognized) and e.type == "MyCustomError" and e.line.lineno == 3


def test_nccl_warn_line_is_an_unrecognized_failure(m):
    # NCCL src/include/shm.h (2.7-2.11): SYSCHECKVAL prints "Call to %s failed : %s" through WARN()
    data = b"gpu3:4411:4502 [1] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n"
    (e,) = events(m, data)
    assert isinstance(e, Unrecognized) and e.type == "NCCL WARN" and e.message.startswith("Call to shm_open failed")
    assert events(m, b"gpu3:4411:4502 [1] NCCL INFO include/shm.h:41 -> 2\n") == []


def test_exception_words_inside_a_warning_are_not_errors(m):
    data = b"UserWarning: falling back because of ImportError: no module\nWARNING:root:ValueError: ignored\n"
    assert events(m, data) == []


def test_peel_glog_and_timestamps():
    line = peel("f", 1, "[rank0]:[E1202 10:00:00.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught")
    assert line.rank == 0 and line.level == "ERROR" and line.text == "[Rank 0] Watchdog caught"
    line = peel("f", 1, "2024-05-09 17:35:49,123 - INFO - hello")
    assert line.text.endswith("hello")


LINES = st.lists(
    st.one_of(
        st.sampled_from(["errmap-test-marker 1", "errmap-test-marker 22", "KeyError: 'x'", "step 1 loss=0.1", ""]),
        st.text(max_size=30),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(LINES, st.sampled_from([b"\n", b"\r\n", b"\r"]), st.integers(1, 40))
def test_any_chunk_split_gives_the_same_events(m, lines, sep, size):
    data = sep.join(s.encode("utf-8", "replace") for s in lines)
    whole = [(type(e).__name__, e.line.lineno, e.line.text) for e in events(m, data)]
    split = [(type(e).__name__, e.line.lineno, e.line.text) for e in events(m, data, chunk=size)]
    assert whole == split


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000), st.integers(1, 64))
def test_arbitrary_bytes_never_raise(m, data, size):
    events(m, data, chunk=size)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab \r", max_size=8), max_size=20), st.integers(0, 25))
def test_reported_line_is_the_lines_position(m, filler, where):
    lines = [s.replace("\r", "") for s in filler]
    where = min(where, len(lines))
    lines.insert(where, "errmap-test-marker 5")
    data = "\n".join(lines).encode()
    assert markers(events(m, data, chunk=7)) == [(where + 1, "5")]


def test_peel_torch2_glog_without_thread_and_old_vllm():
    line = peel("f", 1, "[W1202 11:13:41.396213183 ProcessGroupNCCL.cpp:1575] Warning: something")
    assert line.level == "WARNING" and line.text == "Warning: something"
    line = peel("f", 1, "ERROR 12-02 08:41:31 engine.py:135] RuntimeError: boom")
    assert line.level == "ERROR" and line.text == "RuntimeError: boom"


def test_peel_python_glog_and_ray_cpp_prefixes():
    line = peel("f", 1, "W1202 11:18:34.86 26072 torch/distributed/run.py:874] careful")
    assert line.level == "WARNING" and line.text == "careful"
    line = peel("f", 1, "[2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:1: worker died")
    assert (line.level, line.actor, line.text) == ("ERROR", "raylet", "node_manager.cc:1: worker died")


def test_peel_rays_python_logger():
    # ray_constants.LOGGER_FORMAT: "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"
    line = peel("f", 1, "2026-12-04 01:33:51,938\tWARNING http_server_agent.py:79 -- Failed to bind to port 52365")
    assert (line.level, line.time, line.text) == ("WARNING", "2026-12-04 01:33:51,938", "Failed to bind to port 52365")


def test_peel_more_launcher_prefixes():
    assert peel("f", 1, "[E314 14:33:45.172185860 ProcessGroupNCCL.cpp:607] boom").text == "boom"
    line = peel("f", 1, "[E ProcessGroupNCCL.cpp:737] boom")
    assert (line.level, line.text) == ("ERROR", "boom")
    line = peel("f", 1, "node7:2841:2903 [0] NCCL WARN Cuda failure 'out of memory'")
    assert (line.host, line.pid, line.text) == ("node7", 2841, "NCCL WARN Cuda failure 'out of memory'")


def test_peel_sglang_prefix_and_indentation():
    assert peel("f", 1, "[2025-03-01 10:00:00 TP0] Scheduler hit an exception").text == "Scheduler hit an exception"
    assert peel("f", 1, "  torch.OutOfMemoryError: CUDA out of memory.").text == "torch.OutOfMemoryError: CUDA out of memory."


def test_matching_again_while_an_interrupted_scan_still_holds_a_view_of_the_buffer(m):
    # An interrupt inside the prefilter leaves its frames (and their view of the buffer) on the traceback while
    # watch's cleanup matches what was left: the buffer cannot be resized in place then, and must not raise.
    scanner = Scanner(m, "t.log")
    scanner.take(b"errmap-test-marker 1\nerrmap-test-marker 2\npartial")
    held = memoryview(scanner._buf)  # what the interrupted frame keeps
    assert markers(scanner.match()) == [(1, "1"), (2, "2")]
    assert markers(scanner.finish()) == [] and held.tobytes().endswith(b"partial")
    held.release()


@pytest.mark.parametrize("stamped", [False, True], ids=["the same bytes", "another time and rank"])
def test_a_line_that_gave_nothing_is_matched_once_however_often_it_comes(m, monkeypatch, stamped):
    """torchvision's harmless warning quotes 1007's message (its guard says so): a scanner that met it once skips it,
    also when every rank prints it at every step (its prefix's digits differ)."""
    log = Path(__file__).parent.parent / "fixtures" / "clean" / "platform-torchvision-image-extension-warning.log"
    warning = log.read_bytes().splitlines()[1] + b"\n"
    assert b"undefined symbol" in warning
    tried = []
    match_line = m.match_line
    monkeypatch.setattr(m, "match_line", lambda line, *a, **k: tried.append(line.lineno) or match_line(line, *a, **k))
    lines = [(b"2026-12-04 10:%02d:%02d,%03d [rank%d]:" % (i // 60 % 60, i % 60, i % 997, i % 8) if stamped else b"")
             + warning for i in range(1000)]
    data = b"".join(lines[:500]) + b"errmap-test-marker 7\n" + b"".join(lines[500:])
    assert markers(events(m, data, chunk=4096)) == [(501, "7")]
    assert tried == [1, 501]  # the warning once, the marker once


def _anchors(*anchors: tuple[str, str]) -> Matcher:
    """A KB of these anchors (literal, pattern), one per entry: 1001's, 1002's..."""
    real = {e.errno: e for e in kbmod.load()}
    return Matcher([replace(real[1001 + k], anchors=(Anchor(lit, pattern, "a test"),))
                    for k, (lit, pattern) in enumerate(anchors)])


@pytest.mark.parametrize("line", [
    b"not frobnicate now, code 6 failed",  # the other anchor's literal, with its digit read as 0, is in the line
    b"not frobnicate now, code" + b" " * 24 + b"6 failed",  # a terminal's padding, which may hide a literal
    b"not frobnicate now, code" + b" " * 12 + b"\x00" + b" " * 12 + b"6 failed",  # padding once the NUL is gone
    b"not frobnicate now, code" + b" " * 12 + b"[0m" + b" " * 12 + b"6 failed",  # once the lost colour code is gone
])
def test_a_line_that_gave_nothing_is_not_taken_for_one_with_other_digits_that_matches(line):
    """Lines are remembered by their shape (digits read as 0) only where no digit can matter: here the same line
    with a 7 for the 6 holds 1002's literal (at once or once its padding is read as one blank), and with a 5 it does
    not (what a shape allows is read once, from the first line that comes again)."""
    m = _anchors(("frobnicate now", r"(?<!not )frobnicate now"), ("code 7 failed", r"code 7 failed"))
    evs = events(m, b"\n".join([line, line.replace(b"6", b"5"), line.replace(b"6", b"7")]) + b"\n")
    assert [(e.line.lineno, e.entry.errno) for e in evs if isinstance(e, Match)] == [(3, 1002)]


def test_a_line_is_not_taken_for_one_with_other_digits_where_an_anchor_tells_digits_apart():
    """1001's anchor reads a digit that its literal does not hold: a line with a 6 gives nothing, with a 7 a match."""
    m = _anchors(("frobnicate now", r"frobnicate now, code [7] failed"), ("widget", r"widget \d+ failed"))
    assert m.digit_bound == {0}
    evs = events(m, b"frobnicate now, code 6 failed\nfrobnicate now, code 7 failed\n")
    assert [(e.line.lineno, e.entry.errno) for e in evs if isinstance(e, Match)] == [(2, 1001)]


def test_a_remembered_line_still_ends_a_traceback(m):
    """A line that gave nothing (a logger's prefix before an exception line) is read again where it ends a traceback."""
    line = b"wandb: FrobnicatorError: the widget came apart\n"
    tb = b'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    main()\n'
    evs = events(m, line * 3 + tb + line + line, chunk=32)  # the line again in later chunks
    assert [(e.line.lineno, e.type, e.message) for e in evs if isinstance(e, Unrecognized)] == \
        [(7, "FrobnicatorError", "the widget came apart")]


def test_the_lines_a_scanner_remembers_are_bounded(m):
    """Distinct lines that gave nothing, short and long: the scanner's memory of them stays within its bounds."""
    from errmap.scan import scanner as matcher

    def word(i: int) -> bytes:  # distinct in letters: lines that differ only in digits are remembered as one
        return bytes(97 + i // 26 ** k % 26 for k in range(3))

    sc = Scanner(m, "t.log")
    for i in range(3 * matcher.UNMATCHED):
        sc.feed(b"grad_Error_norm %s\n" % word(i) + b"x" * (i % 3 * 900) + b" Error_rate %s\n" % word(i))
        assert len(sc._unmatched) <= matcher.UNMATCHED
        assert sum(len(shape) + len(line) for shape, (_, _, line) in sc._unmatched.items()) <= matcher.UNMATCHED_BYTES
    assert sc._unmatched  # it did remember
