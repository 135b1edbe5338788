"""Hard-wrapped failure lines: a message broken at a terminal's or a paste's width is still known."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from errmap.kb import load as kbmod
from errmap.scan.matcher import GENERIC, Matcher
from errmap.scan.events import Match, Unrecognized
from errmap.scan.scanner import scan_chunks

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures").glob("10[0-9][0-9]/*.log"))


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(kbmod.load())


def scan(matcher: Matcher, data: bytes) -> list:
    return list(scan_chunks(matcher, "t.log", [data]))


def wrapped_cases(matcher: Matcher) -> list[tuple[int, str]]:
    """(errno, line) for every fixture's diagnosed line long enough to wrap that is also an exception line."""
    cases = []
    for log in FIXTURES:
        for ev in scan(matcher, log.read_bytes()):
            text = ev.line.text if isinstance(ev, Match) and ev.anchor is not None else ""  # by an anchor, not by hints
            # an exception line (a kernel's assertion, wrapped before its "Assertion", is no failure line until joined)
            if len(text) > 100 and (g := GENERIC.match(text)) and g["type"] != "Assertion" and "  " not in text:
                cases.append((ev.entry.errno, text))
    return cases


# every line behind the same prefix: none, a job runner's logger at INFO (a quiet level), Kubernetes' CRI log file
@pytest.mark.parametrize("prefix", ["", "[16:10:33] stdout/INFO  ", "2016-10-06T00:17:09.669794202Z stderr F "])
def test_wrapped_exception_lines_keep_their_code(matcher, prefix):
    cases = wrapped_cases(matcher)
    assert len(cases) >= 10  # the property is exercised on many entries, not one
    for errno, text in cases:
        # at most four parts, broken at spaces (as a terminal or a paste does), none shorter than 60
        parts = textwrap.wrap(text, width=max(60, len(text) // 4 + 1), break_long_words=False, break_on_hyphens=False)
        if len(parts) > 4:
            continue
        found = {e.entry.errno for e in scan(matcher, "".join(prefix + p + "\n" for p in parts).encode()) if isinstance(e, Match)}
        assert errno in found, (errno, parts)


def test_lines_folded_inside_words_keep_their_code(matcher):
    # a fixed width, as `fold` or a terminal's paste cuts: breaks fall inside words
    for errno, text in wrapped_cases(matcher):
        width = max(60, len(text) // 4 + 1)
        parts = [text[i:i + width] for i in range(0, len(text), width)]
        if len(parts) > 4 or any(p[-1:].isspace() or p[:1].isspace() for p in parts):
            continue  # a break beside a space reads as a word wrap (above)
        found = {e.entry.errno for e in scan(matcher, "".join(p + "\n" for p in parts).encode()) if isinstance(e, Match)}
        assert errno in found, (errno, parts)


def test_wraps_turned_into_runs_of_blanks_keep_their_code(matcher):
    # a screen copied whole: each row padded with blanks to the terminal's width, the rows on one line
    for errno, text in wrapped_cases(matcher):
        width = max(60, len(text) // 4 + 1)
        parts = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False)
        if len(parts) > 4 or max(map(len, parts)) > width:
            continue  # a word longer than the width: a terminal would have cut it
        padded = "".join(p.ljust(width + 24) for p in parts[:-1]) + parts[-1]
        found = {e.entry.errno for e in scan(matcher, (padded + "\n").encode()) if isinstance(e, Match)}
        assert errno in found, (errno, padded)


def test_a_following_failure_is_not_a_continuation(matcher):
    # the second line is a failure of its own: the first stays unrecognized and nothing is joined
    data = b"RuntimeError: something no entry knows\nValueError: and another thing\n"
    evs = scan(matcher, data)
    assert [type(e) for e in evs] == [Unrecognized, Unrecognized]


def test_a_match_must_start_on_the_failure_line(matcher):
    # a known message on the next line is matched there, as its own line, not glued to the one before
    known = next(text for errno, text in wrapped_cases(matcher))
    data = f"RuntimeError: something no entry knows\n{known.split(': ', 1)[1]}\n".encode()
    evs = scan(matcher, data)
    assert all(e.line.lineno == 2 for e in evs if isinstance(e, Match))
