"""The anchors' supersets only skip work: the events are the same with them (ERRMAP_PREFILTER=hyperscan), with the
literal stage one alone (=hyperscan-literals, =ahocorasick) and with no automaton at all (=none, Python's substring
search), on every fixture, every clean log, both bench logs and a generated corpus of hostile lines."""

from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT, errmap

hyperscan = pytest.importorskip("hyperscan", reason="the supersets run where Hyperscan has a wheel")
from errmap.kb import load as kbmod
from errmap.scan import failures as failures_module
from errmap.scan import matcher as matcher_module
from errmap.scan import scanner as scanner_module
from errmap.scan.matcher import Matcher
from errmap.scan.scanner import scan_chunks
from errmap.scan.superset import digit_blind, superset

LOGS = sorted(FIXTURES.rglob("*.log"))
ENGINES = ["hyperscan", "hyperscan-literals", "ahocorasick", "none"]


@pytest.fixture(scope="module")
def matchers() -> dict[str, Matcher]:
    out = {}
    kb = kbmod.load()
    for engine in ENGINES:
        os.environ["ERRMAP_PREFILTER"] = engine
        try:
            out[engine] = Matcher(kb)
        finally:
            del os.environ["ERRMAP_PREFILTER"]
    assert out["hyperscan"].supersets is not None and out["hyperscan-literals"].supersets is None
    return out


def events(m: Matcher, data: bytes, step: int = 1 << 20, remember: bool = True) -> list[tuple]:
    """The events of a scan; without `remember`, the scanner matches every line again however often it comes."""
    kept = scanner_module.UNMATCHED_MAX
    scanner_module.UNMATCHED_MAX = kept if remember else -1
    try:
        return [
            (type(e).__name__, e.line.lineno, e.line.text, e.line.rank, e.line.level, getattr(getattr(e, "entry", None), "errno", None),
             getattr(e, "captures", None), getattr(e, "type", None), getattr(e, "message", None), getattr(e, "stack", None))
            for e in scan_chunks(m, "f", [data[i: i + step] for i in range(0, len(data), step)])
        ]
    finally:
        scanner_module.UNMATCHED_MAX = kept


def agree(matchers: dict[str, Matcher], data: bytes, step: int = 1 << 20) -> list[tuple]:
    """The events of every engine, remembering the lines that gave nothing, are those of Python's substring search
    matching every line."""
    want = events(matchers["none"], data, step, remember=False)
    assert events(matchers["none"], data, step) == want, "remembered"
    for engine in ENGINES[:-1]:
        assert events(matchers[engine], data, step) == want, engine
    return want


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_and_clean_log(matchers, log):
    agree(matchers, log.read_bytes())


def test_all_fixtures_as_one_log_in_small_chunks(matchers):
    data = b"".join(p.read_bytes() + b"\n" for p in LOGS)
    assert len(agree(matchers, data, step=4096)) > 500


def test_every_line_of_the_fixtures_again_and_again_in_another_order(matchers):
    """Lines that come back (in other tracebacks, after other stacks and GPUs are named) give what they gave alone."""
    lines = [line for p in LOGS for line in p.read_bytes().splitlines()]
    data = b"\n".join(lines + lines[::-1] + lines[::3] + lines[1::2]) + b"\n"
    assert len(agree(matchers, data, step=1 << 16)) > 1500


def _shifted(line: bytes, by: int) -> bytes:
    """The line with each ASCII digit d read as (d + by) mod 10: the same line at another time, rank or count."""
    return line.translate(bytes.maketrans(b"0123456789", bytes(48 + (d + by) % 10 for d in range(10))))


def test_every_line_of_the_fixtures_again_with_other_digits(matchers):
    """A line remembered by its shape (digits read as 0) gives nothing again only where its digits cannot matter:
    each fixture line comes with its digits shifted, before and after the line itself, and every shift of a line
    gives what it gives matched alone."""
    lines = [line for p in LOGS for line in p.read_bytes().splitlines()]
    data = b"\n".join([_shifted(line, by) for by in (9, 1, 0, 5, 0) for line in lines]) + b"\n"
    assert len(agree(matchers, data, step=1 << 16)) > 2500


def test_every_anchor_has_a_superset_hyperscan_takes(matchers):
    """Each official anchor and the generic shapes: none falls back to its literal today."""
    m = matchers["hyperscan"]
    assert m.gate == set(range(len(m.anchors))) | {-1}


@pytest.mark.parametrize("pattern, yes, no", [
    (r"^Killed$", ["x Killed y"], ["Kill"]),
    (r"(?<![\w.])CUDA error: (?P<m>.+)$", ["aCUDA error: x"], ["CUDA error: "]),
    (r"(?i)out of memory", ["OUT OF MEMORY", "out of memory"], ["out of mem"]),
    (r"(?i)kill", ["\u212aill"], ["kil"]),  # the Kelvin sign folds to k
    (r"^(?:[\w.]+: )*Bad \w{3} (\d+) end", ["Bad éé日 7 end", "x.y: Bad abc 12 end"], ["Bad ab 1 end"]),
    (r"No (?P<x>a|b)+ (?P=x)!", ["No ab c!"], ["No  !"]),
])
def test_superset_examples(pattern, yes, no):
    """Matches wherever the pattern does, in UTF-8, whatever precedes it; not where its literal text is missing."""
    sup = superset(pattern)
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=[sup], ids=[0], elements=1, flags=0)

    def hit(text: str) -> bool:
        found = []
        db.scan(text.encode(), match_event_handler=lambda *a: found.append(a))
        return bool(found)

    for text in yes:
        assert hit(text), text
    for text in no:
        assert not hit(text), text


def test_generic_shapes_run_only_where_a_line_s_text_can_start():
    """GENERIC runs at the start of the text peel leaves: after a known prefix and blanks, not after any blank."""
    from errmap.scan.matcher import BEFORE_TEXT, GENERIC

    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=[superset(GENERIC.pattern, after=BEFORE_TEXT)], ids=[0], elements=1, flags=0)

    def hit(line: bytes) -> bool:
        found = []
        db.scan(line, match_event_handler=lambda *a: found.append(a))
        return bool(found)

    for line in [b"ValueError: x", b"[rank3]: ValueError: x", b"(WorkerDict pid=1, ip=h) torch.OutOfMemoryError: y",
                 b"ERROR 05-09 17:35:49 [engine.py:160] RuntimeError: z", b"  KeyError", b"2024-05-09T17:35:49ZKeyError: 1",
                 b"svc-1  | ValueError: w"]:
        assert hit(line), line
    for line in [b"/x/y.py:50: UserWarning: no: ModuleNotFoundError(\"a\")", b"foo bar KeyError: x", b"fooKeyError: x"]:
        assert not hit(line), line


@pytest.mark.parametrize("pattern, blind", [
    (r"\d+ (?:bytes|GiB)", True), (r"[!-~]", True), (r"\w[\w.]*", True), (r"(?P<q>['\"])x(?P=q)", True),
    (r"exit code -9", False), (r"[0-5]", False), (r"[^7]", False), (r"\x38", False), (r"(\d)\1", False),
    (r"(?(1)a|b)", False), (r"\p{Nd}", False),
])
def test_digit_blind_patterns(pattern, blind):
    assert digit_blind(pattern) is blind


def test_what_a_line_that_gave_nothing_went_through_cannot_tell_digits_apart():
    """A line is remembered by its shape (digits read as 0) because what reads it besides the anchors is blind to
    digits: the prefixes peel takes and what it removes or rewrites, the generic shapes, the escapes."""
    from errmap.scan import lines

    for pattern in (lines.PREFIX.pattern, lines._LOST_SGR.pattern, lines._REPEATED.pattern, lines._RAISE.pattern,
                    lines.ANSI.pattern.decode("latin-1"), matcher_module.GENERIC.pattern, matcher_module.GPU_ERROR.pattern,
                    failures_module.RAISED.pattern, scanner_module._SHAPED.pattern.decode("latin-1"),
                    matcher_module.BEFORE_TEXT, matcher_module.PADDED.pattern):
        assert digit_blind(pattern), pattern


def test_superset_of_an_empty_match_is_none():
    assert superset(r"^(?=.*x)") is None
    assert superset(r"\b") is None


# ---------------------------------------------------------------- a generated corpus

def _error_lines() -> list[str]:
    """Real error lines: the texts of the fixtures' lines that an anchor or a generic shape matches."""
    m = Matcher(kbmod.load())
    out = set()
    for log in LOGS:
        out |= {e.line.text for e in scan_chunks(m, "f", [log.read_bytes()]) if hasattr(e, "message") or hasattr(e, "captures")}
    return sorted(t for t in out if len(t) < 400)


ERROR_LINES = _error_lines()
LITERALS = sorted({lit for e in kbmod.load() for a in e.anchors for lit in a.literals})
PREFIXES = ["", "svc-1  | ", "[pod/trainer-0/main] ", "[rank3]:", "[default1]:", "(WorkerDict pid=123, ip=10.0.0.1) ",
            "\x1b[36m(TaskRunner pid=9)\x1b[0m ", "[33m", "2024-05-09 17:35:49,123 ", "ERROR 05-09 17:35:49 [engine.py:160] ",
            "[E1202 10:00:00.123456 1234 ProcessGroupNCCL.cpp:616] ", "3: ", "Dec 02 10:00:01 node1 python[123]: ",
            "WARNING:root:", "  ", "\t", "日志: ", "é", "x", "\x00", "\u00a0", "\x1b[1;31m", "raise ValueError(\"",
            "[2025-03-01 10:00:00 TP0] ", "stderr/INFO  ", "[0/0] ", "\x1b]0;title\x07", "\xc2\x9b",
            "2016-10-06T00:17:09.669794202Z stderr F "]
NOISE = ["", " ", "é", "日本", "\x1b[0m", "[0m", "[1;31m", "\x00", "\r", "  ", "\u212a", "ſ", "\u3000", "٣", "\ufffd",
         ":", "'", '"', ")", "(", "raise ", "\x1b", "\n", " [repeated 7x across cluster]"]


@st.composite
def hostile_lines(draw) -> str:
    base = draw(st.sampled_from(ERROR_LINES + LITERALS))
    if draw(st.booleans()):  # cut, case-flipped or widened at some places
        for _ in range(draw(st.integers(1, 3))):
            k = draw(st.integers(0, len(base)))
            how = draw(st.sampled_from(["noise", "cut", "case"]))
            if how == "noise":
                base = base[:k] + draw(st.sampled_from(NOISE)) + base[k:]
            elif how == "cut":
                base = base[:k] + base[k + draw(st.integers(1, 3)):]
            else:
                base = base[:k] + base[k:k + 1].swapcase() + base[k + 1:]
    prefix = "".join(draw(st.lists(st.sampled_from(PREFIXES), max_size=3)))
    suffix = draw(st.sampled_from(NOISE + ["", "", "Error", " Error", "Exception"]))
    return prefix + base + suffix


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(lines=st.lists(hostile_lines(), min_size=1, max_size=12), invalid=st.booleans())
def test_generated_lines_mixing_literals_prefixes_escapes_and_non_ascii(matchers, lines, invalid):
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    data = b"\n".join([_shifted(data, 3), data, _shifted(data, 7)])  # each line again, at another time or rank
    if invalid:  # a byte that is no UTF-8 in the middle
        data = data[: len(data) // 2] + b"\xe4\xff" + data[len(data) // 2:]
    agree(matchers, data, step=64)


# ---------------------------------------------------------------- the CLI's JSON: engines and processes

def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    import bench

    return bench


@pytest.fixture(scope="module")
def bench_logs(tmp_path_factory):
    bench = _bench()
    folder = tmp_path_factory.mktemp("bench")
    out = {}
    for profile in bench.PROFILES:
        out[profile] = folder / f"{profile}.log"
        bench.make_log(out[profile], 17 << 20, profile=profile)  # past scan.PARALLEL_MIN: split over processes
    return out


def _json(*args: str, engine: str) -> dict:
    proc = errmap("scan", "--format", "json", *args, env={"ERRMAP_PREFILTER": engine}, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return json.loads(proc.stdout)


@pytest.mark.parametrize("profile", list(_bench().PROFILES))
def test_bench_logs_give_the_events_of_a_scanner_matching_every_line_again(matchers, bench_logs, profile):
    """The bench's lines come again by their bytes (near-miss), by their shape (stamped) or not at all (unique)."""
    with open(bench_logs[profile], "rb") as f:
        data = f.read(6 << 20)
    assert agree(matchers, data[: data.rfind(b"\n") + 1])


@pytest.mark.parametrize("profile", list(_bench().PROFILES))
def test_bench_logs_give_one_json_report_whatever_the_engine_and_processes(bench_logs, profile):
    log = str(bench_logs[profile])
    want = _json("-j", "1", log, engine="hyperscan-literals")
    assert want["diagnoses"]
    assert _json("-j", "1", log, engine="hyperscan") == want
    assert _json("-j", "2", log, engine="hyperscan") == want
    assert _json("-j", "2", log, engine="ahocorasick") == want


def test_fixtures_give_one_json_report_whatever_the_engine():
    want = _json("--one-run", str(FIXTURES), engine="none")
    for engine in ENGINES[:-1]:
        assert _json("--one-run", str(FIXTURES), engine=engine) == want, engine
