"""The text report laid out at the terminal's width: on a real pty of 80x24 and 200x50, and in a pipe.

Lines wrap with hanging indents and never inside a `code span`, a config key, a path or a URL; every
fixture's report fits the 80x24 screen it ends on, its first diagnosis whole, -v shows all of it;
Chinese (two cells a character) too.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest
from rich.cells import cell_len

from conftest import FIXTURES, ROOT, errmap
from screens import screens

CASCADE = "fixtures/1031/gpu-gloo-oom-cascade.log"
P40 = "fixtures/1012/vllm-prefix-prefill-p40.log"
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
SPAN = re.compile(r"`[^`]+`")
KEY = re.compile(r"\w+(?:\.\w+)+|\w*[a-z]_\w+", re.ASCII)  # dotted.keys and snake_case_tokens


def on_terminal(args: list[str], cols: int, rows: int, env: dict | None = None) -> list[str]:
    """errmap's output lines on a real pty of `cols` x `rows` (COLUMNS unset: the window size decides)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    base = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    p = subprocess.Popen([sys.executable, "-m", "errmap", *args], stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                         env={**base, "TERM": "xterm-256color", "ERRMAP_LANG": "en", **(env or {})}, start_new_session=True)
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: errmap exited and the terminal has nothing left to read
                break
            if not data:
                break
            seen += data
    else:
        os.killpg(p.pid, signal.SIGKILL)
        raise AssertionError(f"errmap hung on a terminal; it printed {seen!r}")
    os.close(master)
    p.wait(timeout=30)
    text = ESCAPES.sub("", seen.decode("utf-8"))
    assert f'File "{ROOT / "errmap"}' not in text, text  # never a traceback of errmap's own
    return text.replace("\r\n", "\n").split("\n")


def piped(*args: str, cols: int | None = None, env: dict | None = None) -> list[str]:
    base = {"COLUMNS": str(cols) if cols else ""}
    return errmap(*args, env={**base, **(env or {})}).stdout.decode().split("\n")


def diagnosis(lines: list[str], n: int = 1) -> list[str]:
    """The rows of diagnosis `n`: from its header to the blank line after it."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{n}. "))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return lines[start:end]


def flat(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def tokens_whole(kb_text: list[str], lines: list[str], room: int) -> None:
    """Every code span and config key of `kb_text` that fits in `room` cells is whole on one rendered line."""
    for text in kb_text:
        for token in {*SPAN.findall(text), *KEY.findall(SPAN.sub(" ", text))}:
            if cell_len(token) <= room:
                assert any(token in line for line in lines), (token, lines)


def steps_of(path: str) -> list[str]:
    doc = json.loads(errmap("scan", "--format", "json", path).stdout)
    return doc["diagnoses"][0]["fix"]


@pytest.mark.parametrize("log", [CASCADE, "fixtures/1017/verl-log-prob-oom.log"])  # 3 steps for its stack; more
def test_a_diagnosis_on_an_80x30_terminal(log):
    lines = on_terminal(["scan", log], 80, 30)
    assert all(cell_len(line) <= 80 for line in lines), [line for line in lines if cell_len(line) > 80]
    d = diagnosis(lines)
    assert on_screen(lines, 80)[-1] <= 29, "\n".join(lines)
    steps = steps_of(log)
    shown = [i for i, line in enumerate(d) if re.match(r"\s+(Fix\s+)?\d+\. ", line)]
    assert min(2, len(steps)) <= len(shown) <= min(3, len(steps))  # three, or two where three would not fit the screen
    assert (f"({len(steps) - len(shown)} more step" in flat(d)) == (len(steps) > len(shown))
    assert all(flat([step]) in flat(d) for step in steps[:len(shown)])
    tokens_whole(steps[:len(shown)], d, 80 - 13)
    # Hanging indents: the cause's lines under its text, each step's lines under the text after "1. ".
    cause = next(i for i, line in enumerate(d) if line.startswith("   Cause  "))
    assert [line[:10] for line in d[cause + 1:shown[0]]] == [" " * 10] * (shown[0] - cause - 1)
    assert len(range(cause, shown[0])) <= 3 and d[shown[0] - 1].endswith("…")
    text = re.match(r"\s+(Fix\s+)?\d+\. ", d[shown[0]]).end()  # where a step's text starts, after its number
    for a, b in zip(shown, shown[1:]):
        assert all(line.startswith(" " * text) and line[text] != " " for line in d[a + 1:b])
    evidence = next(line for line in d if "│" in line)
    assert evidence.endswith("…") and cell_len(evidence) == 80  # one row, cut at the width
    assert sum("https://" in line for line in d) == 1 and "more: errmap explain 1017" in flat(d)


def on_screen(lines: list[str], cols: int) -> list[int]:
    """The screen row (from 1) each line ends on, a line wider than `cols` folded by the terminal."""
    ends, row = [], 0
    for line in lines:
        row += max(1, -(-cell_len(line) // cols))
        ends.append(row)
    return ends


def step_rows(d: list[str]) -> list[int]:
    """The rows of a diagnosis where a fix step starts: its number (right-aligned) where the first one's is."""
    fix = next((i for i, line in enumerate(d) if line.startswith("   Fix ")), len(d))
    col = re.match(r"   Fix +", d[fix]).end() if fix < len(d) else 0
    return [i for i in range(fix, len(d)) if re.match(r" ?\d+\. ", d[i][col - 1:]) and not d[i][:col - 1].replace("   Fix", "", 1).strip()]


def test_every_fixture_fits_the_80x24_screen_it_ends_on_with_its_first_diagnosis_whole(tmp_path):
    """Each fixture's scan on a real 80x24 pty, as the terminal shows it when the scan ends: all of it in 23
    rows (the shell's prompt takes the last), so the first diagnosis, from its code and title to its link
    and `more:` line, stays on the screen with its evidence, cause, whole fix steps (the `more:` line counts
    the others; at least one, unless the first is taller than what the rest leaves) and one link; one line
    says when later diagnoses were left out; no code span split across lines anywhere in the diagnoses (one
    wider than the screen runs past its edge whole, on a line of its own)."""
    logs = sorted(str(p.relative_to(ROOT)) for p in FIXTURES.glob("**/*.log") if "sessions" not in p.parts)
    paths = logs + sorted(str(p.relative_to(ROOT)) for p in FIXTURES.glob("sessions/*/logs"))
    env = {"ERRMAP_LANG": "en", "ERRMAP_DOCS_URL": ""}
    shown = screens(paths, 80, 24, ROOT, env, tmp_path)
    assert len(logs) > 300
    stepless: dict[str, int] = {}  # a log whose first diagnosis shows no step: the rows its report took
    for i, path in enumerate(paths):
        lines, doc = shown[path], json.loads((tmp_path / f"{i}.json").read_text())
        assert f'File "{ROOT / "errmap"}' not in "\n".join(lines), (path, lines)
        assert on_screen(lines, 80)[-1] <= 23, (path, "\n".join(lines))
        roots = [d for d in doc["diagnoses"] if not d["caused_by"]]  # those not folded under another, as shown
        if not roots:
            assert "fixtures/10" not in path and not any(line.startswith("1. ") for line in lines), (path, lines)
            continue
        first = roots[0]
        start = lines.index(next(line for line in lines if line.startswith("1. ")))
        end = next(i for i in range(start, len(lines)) if lines[i].startswith("   more: errmap explain "))
        d = lines[start:end + 1]
        cause = next(i for i, line in enumerate(d) if line.startswith("   Cause  "))
        assert d[0].startswith(f"1. {first['errno']} ") and any("│" in line for line in d[:cause]), (path, d)
        steps = step_rows(d)
        links = [line for line in d if re.match(r"   \w+ +https?://", line)]
        assert len(links) == min(1, len(first["links"])), (path, d)
        if first["fix"] and not steps:
            stepless[path] = on_screen(lines, 80)[-1]
        assert all(flat([step]) in flat(d) for step in first["fix"][:len(steps)]), (path, d)
        left = len(first["fix"]) - len(steps)
        assert d[-1].endswith(f"({left} more step{'s' * (left > 1)})" if left else f" {first['errno']}"), (path, d)
        if sum(bool(re.match(r"\d+\. \d{4} ", line)) for line in lines) < len(roots):
            assert lines[-1].startswith("Shortened to fit the screen; --verbose shows all of it"), (path, lines)
        blank = [i for i in range(start, len(lines)) if not lines[i].strip()]
        for line in lines[start:blank[-1] if blank else None]:
            assert "│" in line or line.count("`") % 2 == 0, (path, line)  # a code span ends on the line it starts on
    assert len(stepless) < 5, stepless  # rare: a first step taller than the screen leaves; on a taller one, shown
    tall = screens(list(stepless), 80, 60, ROOT, env, tmp_path)
    for path, taken in stepless.items():
        lines = tall[path]
        one = next(i for i, line in enumerate(lines) if re.match(r"   Fix +\d+\. ", line))
        after = next(i for i in range(one + 1, len(lines)) if re.match(r" +\d+\. |   [a-z]+:? |$", lines[i]))
        assert taken + on_screen(lines[one:after], 80)[-1] > 23, (path, lines[one:after])


def test_the_1031_cascade_on_a_200x50_terminal_and_with_v():
    lines = on_terminal(["scan", CASCADE], 200, 50)
    assert all(cell_len(line) <= 200 for line in lines) and max(map(cell_len, lines)) > 150
    assert len(diagnosis(lines)) < 16
    full = on_terminal(["scan", "-v", CASCADE], 80, 24)
    assert all(cell_len(line) <= 80 for line in full)
    d = diagnosis(full)
    doc = json.loads(errmap("scan", "--format", "json", CASCADE).stdout)["diagnoses"][0]
    assert all(flat([step]) in flat(d) for step in doc["fix"]) and "more step" not in flat(d)
    assert flat([doc["cause"]]) in flat(d) and sum("https://" in line for line in d) == len(doc["links"])
    tokens_whole(doc["fix"], d, 80 - 13)


def test_piped_output_is_80_columns_unless_columns_says_otherwise():
    default = piped("scan", CASCADE)
    assert max(map(cell_len, default)) == 80
    assert piped("scan", CASCADE, cols=80) == default  # the README's sample is this output
    wide = piped("scan", CASCADE, cols=200)
    assert 80 < max(map(cell_len, wide)) <= 200 and len(wide) < len(default)


def test_the_readme_sample_is_the_real_output_at_80_columns():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = f"$ errmap scan {CASCADE}\n"
    start = readme.index(command) + len(command)
    if (ROOT / "site").is_dir():
        pytest.skip("a docs site built in the checkout makes `more:` a link to its pages")
    assert readme[start:readme.index("```", start)] == "\n".join(piped("scan", CASCADE, env={"ERRMAP_DOCS_URL": ""}))


def test_json_is_the_same_at_any_width():
    outs = {errmap("scan", "--format", fmt, CASCADE, env={"COLUMNS": str(cols)}).stdout
            for fmt in ("json",) for cols in (30, 80, 200)}
    assert len(outs) == 1
    assert len({errmap("scan", "--format", "sarif", CASCADE, env={"COLUMNS": str(c)}).stdout for c in (30, 200)}) == 1


def test_a_token_wider_than_the_line_runs_past_the_edge_whole():
    url = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
    pip = "`pip install torch==<version> --index-url https://download.pytorch.org/whl/cu126`"
    lines = piped("explain", "1001", cols=50)
    over = [line for line in lines if cell_len(line) > 50]
    assert over and all(len(SPAN.sub("`…`", line).split()) <= 2 for line in over), over  # a label at most, then the one token
    assert any(url in line for line in lines) and pip in over  # at column 0, the URL with its command


def test_a_path_wider_than_the_screen_takes_a_line_of_its_own_and_no_blank_one(tmp_path):
    folder = tmp_path / ("a-folder-name-longer-than-a-line-" * 3)
    folder.mkdir()
    log = folder / "train.log"
    log.write_bytes((ROOT / CASCADE).read_bytes())
    d = diagnosis(piped("scan", str(log), cols=80))
    assert d[1].startswith(f"{log}:17") and all(line.strip() for line in d)  # at column 0, whole, no empty row before it
    assert all(cell_len(line) <= 80 for line in d if str(log) not in line)


def test_a_token_wider_than_the_indent_allows_moves_to_the_margin_rather_than_folding():
    path = "fixtures/1009/verl-vllm-v0-rollout-p40.log"
    lines = piped("scan", path, cols=80)
    assert all(cell_len(line) <= 80 for line in lines), [line for line in lines if cell_len(line) > 80]
    tokens_whole(steps_of(path)[:1], lines, 80)
    key = "`++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32`,"
    (line,) = [line for line in lines if key in line]
    assert line == "   " + key  # on a line of its own at the diagnosis's margin, under "Fix"
    before = lines[lines.index(line) - 1]
    assert before.startswith(" " * 13) and before.endswith("`actor_rollout_ref.rollout.dtype=float32`,")


def test_explain_wraps_at_80_with_hanging_indents():
    lines = on_terminal(["explain", "CUDA error: no kernel image is available"], 80, 24)
    from errmap.kb import load as kbmod

    e = kbmod.load().entries[1001]
    steps = [e.fill(s.text) for s in e.fix]
    assert flat(steps) in flat(lines) or all(flat([s]) in flat(lines) for s in steps)
    tokens_whole(steps, lines, 80 - 5)
    over = [line for line in lines if cell_len(line) > 80]
    assert all(len(SPAN.sub("`…`", line).split()) <= 2 for line in over), over  # only a token wider than the screen overflows
    first = next(i for i, line in enumerate(lines) if line.startswith("  1. "))
    follow = lines[first + 1]  # under the text after "1. ", or a code span too wide for that at the margin
    assert (follow.startswith("     ") and follow[5] != " ") or (follow.startswith("`") and cell_len(follow) > 80 - 5)


def test_list_at_80_never_breaks_a_title_mid_word():
    from errmap.kb import load as kbmod

    titles = {e.errno: e.title for e in kbmod.load()}
    for lines in (on_terminal(["list"], 80, 24), piped("list", cols=80)):
        assert all(cell_len(line) <= 80 for line in lines)
        rows: dict[int, list[str]] = {}
        last = None
        for line in lines:
            if m := re.match(r"  (\d{4})  \S+\s+", line):
                last = int(m.group(1))
                rows[last] = [line[m.end():]]
                column = m.end()
            elif last is not None and line.startswith(" " * 10) and line.strip():
                assert line[:column].strip() == "" and line[column] != " ", line  # under the title column
                rows[last].append(line[column:])
            else:
                last = None
        assert set(rows) == set(titles)
        for errno, parts in rows.items():
            assert re.sub(r" \(consequence\)$", "", " ".join(parts).strip()) == titles[errno], parts


def test_chinese_wraps_at_80_cells():
    zh = {"ERRMAP_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "zh_CN.UTF-8"}
    from errmap.kb import load as kbmod

    kb = kbmod.load()
    for lines in (on_terminal(["scan", P40], 80, 24, env=zh), piped("scan", "--lang", "zh", P40, cols=80),
                  on_terminal(["explain", "1009", "--lang", "zh"], 80, 24)):
        assert all(cell_len(line) <= 80 for line in lines), [line for line in lines if cell_len(line) > 80]
        assert any(cell_len(line) > 70 for line in lines)  # wrapped at the width, not short of it
    scan = piped("scan", "--lang", "zh", P40, cols=80)
    d = diagnosis(scan)
    assert len(d) <= 24
    shown = json.loads(errmap("scan", "--format", "json", "--lang", "zh", P40).stdout)["diagnoses"][0]["zh"]["fix"][:3]
    assert all(flat([step]).replace(" ", "") in flat(d).replace(" ", "") for step in shown)
    tokens_whole(shown, d, 80 - 12)
    explain = on_terminal(["explain", "1009", "--lang", "zh"], 80, 24)
    tokens_whole(list(kb.zh[1009].fix), explain, 80 - 5)


def test_watch_and_run_take_v():
    log = (ROOT / CASCADE).read_bytes()
    steps = re.compile(r"\s+(Fix\s+)?\d+\. ")

    def shown(out: bytes) -> int:  # fix steps of the first diagnosis printed live
        lines = out.decode().split("\n")
        start = next(i for i, line in enumerate(lines) if line.startswith("1017 "))
        return sum(bool(steps.match(line)) for line in lines[start:lines.index("", start)])

    assert shown(errmap("watch", input=log, env={"COLUMNS": "80"}).stdout) in (2, 3)
    assert shown(errmap("watch", "-v", input=log, env={"COLUMNS": "80"}).stdout) > 3
    assert shown(errmap("run", "--verbose", "--", "cat", CASCADE, env={"COLUMNS": "80"}).stderr) > 3


def test_a_size_stays_with_its_unit_at_every_width():
    split = re.compile(r"\d(?:\.\d+)?\n *(?:[KMGTP]i?B|bytes)\b")
    for cols in range(44, 101, 3):
        out = "\n".join(piped("scan", "-v", CASCADE, cols=cols))
        assert "GiB" in out and not split.search(out), cols


@pytest.mark.parametrize("log", ["fixtures/1022/torchrun-nccl-shm-segment.log", "fixtures/1028/torchrun-bootstrap-no-socket-interface.log"])
def test_runs_summary_fits_the_80x24_screen_it_ends_on(log):
    """After the command's output and the live diagnoses, the summary (its heading, the blank line before it and the
    report) fits the screen less the prompt's row, as scan's report does."""
    lines = on_terminal(["run", "--", "cat", log], 80, 24)
    summary = lines[lines.index("errmap summary") - 1:]
    while summary and not summary[-1].strip():
        summary.pop()
    assert sum(max(1, -(-cell_len(line) // 80)) for line in summary) <= 23, "\n".join(summary)
