"""Failure evidence without the KB (failures.py) and a pasted line read again (readings.py): each shape and each
reading on real messages, through the real matcher, the real triage and the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import errmap
from errmap.kb import load as kbmod
from errmap.kb import model as kbmodel
from errmap.kb.check import check
from errmap.scan.events import Match, Unrecognized
from errmap.scan.matcher import Matcher
from errmap.scan.scanner import scan_chunks
from errmap.scan.triage import Triage


@pytest.fixture(scope="module")
def bare() -> Matcher:
    """A matcher without any KB entry: the failure shapes do not depend on the KB."""
    return Matcher(kbmodel.KB({}))


def events(matcher: Matcher, text: str) -> list:
    return list(scan_chunks(matcher, "t.log", [text.encode()]))


def unknown(matcher: Matcher, text: str) -> list[tuple[str, bool]]:
    return [(e.type, e.weak) for e in events(matcher, text) if isinstance(e, Unrecognized)]


def codes(matcher: Matcher, text: str) -> list[tuple[int, str]]:
    return [(e.entry.errno, e.confidence) for e in events(matcher, text) if isinstance(e, Match)]


# Failure lines in shapes no anchor was written for, each as the software prints it.
@pytest.mark.parametrize("line, kind", [
    # CPython: `raise Exception("...")` (DeepSpeed's op builder before 0.10 raised a bare Exception)
    ("Exception: the widget came apart", "Exception"),
    # argparse's parser.error(): "<prog>: error: <message>" after the usage lines
    ("train.py: error: unrecognized arguments: --lr 1e-5", "error"),
    # Slurm's srun
    ("srun: error: node3: task 0: Exited with exit code 1", "error"),
    # torch.nn.Module.load_state_dict's message when printed without its RuntimeError
    ("Error(s) in loading state_dict for GPT2LMHeadModel:", "Error(s)"),
    # glibc's __assert_fail
    ("python3: ../src/widget.c:42: frob: Assertion `n < 8' failed.", "Assertion"),
    # bash reporting a job the kernel killed, and zsh's lower-case signal names
    ("bash: line 1: 4242 Killed                  python train.py", "Killed"),
    ("zsh: segmentation fault (core dumped)  python train.py", "segmentation fault"),
    ("[1]    18472 segmentation fault (core dumped)  python train.py", "segmentation fault"),  # a zsh job
    # a retyped paste of an exception line in lower or upper case
    ("keyerror: 'the_widget'", "keyerror"),
    ("RUNTIMEERROR: THE WIDGET CAME APART", "RUNTIMEERROR"),
    # an exception named in a sentence of another language
    ("训练到第3步就报错KeyError: 'the_widget'，怎么办", "KeyError"),
])
def test_strong_shapes_are_failures(bare, line, kind):
    assert unknown(bare, line + "\n") == [(kind, False)]


@pytest.mark.parametrize("line", [
    # a handled error quoted in an English warning, and a quiet record
    "UserWarning: falling back because of ImportError: no module",
    "2024-05-09 17:35:49,123 - INFO - __main__ - retrying after ValueError: busy",
    # PyTorch's Python loggers print E records for failures they handle (inductor's autotuning)
    "E1202 12:14:41.207000 41872 torch/_inductor/select_algorithm.py:2613] [3/0] Exception No valid triton configs.",
    # the words without the punctuation of an exception line
    "grad_Error_norm 0.1 Exception_count 0",
    # Ray's C++ logs at E: raylets print them for much they survive
    "(raylet) [2026-12-05 09:12:03,117 E 4411 4439] widget_monitor.cc:116: an Error in the widget",
])
def test_lookalikes_are_not_failures(bare, matcher, line):
    assert unknown(bare, line + "\n") == [] and unknown(matcher, line + "\n") == []


@pytest.mark.parametrize("line, kind", [
    # deepspeed/launcher/launch.py sigkill_handler, at INFO and at ERROR
    ("[2026-12-05 09:12:03,117] [INFO] [launch.py:335:sigkill_handler] Killing subprocess 52817", "Killing subprocess"),
    ("[2026-12-05 09:12:04,002] [ERROR] [launch.py:341:sigkill_handler] ['python', 'train.py'] exits with return code = -9",
     "exits with return code"),
    # a Python logger's ERROR record; c10's glog E record behind a prefix nobody listed, where stage one selects the
    # line (here for a failure word)
    ("2024-05-09 17:35:49,123 - ERROR - trainer - the widget came apart", "ERROR"),
    ("trainer/0 [1]:[E socket.cpp:610] [c10d] the widget came apart with an Error", "ERROR"),
    ("[E1202 10:00:00.123456 1234 widget.cpp:616] the widget came apart with an Error", "ERROR"),
])
def test_weak_shapes_are_failures_of_the_weak_kind(bare, line, kind):
    assert unknown(bare, line + "\n") == [(kind, True)]


def test_weak_shapes_show_only_where_nothing_stronger_is(bare):
    weak = "2024-05-09 17:35:49,123 - ERROR - trainer - the widget came apart\n"
    strong = "KeyError: 'the_widget'\n"
    for text, shown in ((weak, ["ERROR"]), (weak + strong, ["KeyError"])):
        triage = Triage()
        for ev in events(bare, text):
            triage.add(ev)
        assert [r.type for r in triage.unrecognized()] == shown


# The readings of a line no anchor matched as printed, on messages the KB knows.
DEEPSPEED = (">- DeepSpeed Op Builder: Installed CUDA version 12.1 does not match the version torch was compiled with 11.8, "
             "unable to compile cuda/cpp extensions without a matching cuda version.")  # deepspeed/ops/op_builder/builder.py
VLLM_BF16 = ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
             "Your Tesla T4 GPU has compute capability 7.5.")  # vllm/worker/worker.py _check_if_gpu_supports_dtype


def test_a_message_cut_at_its_end_keeps_its_code(matcher):
    assert codes(matcher, f"Exception: {DEEPSPEED}\n") == [(1006, "exact")]
    cut = f"Exception: {DEEPSPEED[:DEEPSPEED.index('unable to') + 9]}\n"  # a paste that lost the last words
    assert codes(matcher, cut) == [(1006, "exact")]
    # at a quiet level too: anchors match at every level
    assert codes(matcher, "[WARNING] RuntimeError: " + VLLM_BF16[len("ValueError: "):60] + "\n") == [(1009, "exact")]


def test_a_line_ending_whole_is_not_read_as_cut(matcher):
    whole = f"Exception: {DEEPSPEED[:DEEPSPEED.index('unable to')].rstrip(', ')}.\n"  # ends with a full stop
    assert codes(matcher, whole) == []


def test_a_message_retyped_in_one_case_keeps_its_code(matcher):
    assert codes(matcher, VLLM_BF16.lower() + "\n") == [(1009, "exact")]
    assert codes(matcher, VLLM_BF16.upper() + "\n") == [(1009, "exact")]


def test_mixed_case_is_the_softwares_own(matcher):
    # `myTrainer` is no `Trainer`: a line in mixed case is compared with its case
    line = "TypeError: myTrainer.__init__() got an unexpected keyword argument 'foo'\n"
    assert [(c, conf) for c, conf in codes(matcher, line) if conf == "exact"] == []


@pytest.mark.parametrize("gutter", ["1831 | ", "[1831] ", "L1831: ", "> ", "> > ", ">   | "])
def test_a_gutter_or_quote_before_every_line_is_peeled(bare, gutter):
    tb = ['Traceback (most recent call last):', '  File "train.py", line 9, in <module>', '    main()',
          "KeyError: 'the_widget'"]
    assert unknown(bare, "".join(gutter + line + "\n" for line in tb)) == [("KeyError", False)]


# The second tier: the words of a family.
def _user_kb(tmp_path: Path, hints: dict[int, list]) -> Path:
    folder = tmp_path / "kb"
    folder.mkdir()
    for errno, words in hints.items():
        (folder / f"{errno}-family-{errno}.yaml").write_text(json.dumps({
            "errno": errno, "slug": f"family-{errno}", "title": f"Family {errno}", "group": "Tests", "role": "root",
            "summary": "A family of failures for the tests.",
            "anchors": [{"literal": f"widget-{errno}-exact", "regex": f"widget-{errno}-exact", "source": "tests"}],
            "hints": words, "cause": "The widget came apart.", "fix": ["Put it together."],
            "links": [{"url": "https://example.org/t", "kind": "docs", "title": "test docs"}]}))
    return folder


def test_a_hint_gives_a_likely_diagnosis_on_a_failure_line_only(tmp_path):
    m = Matcher(kbmod.load([_user_kb(tmp_path, {9101: [["gizmo", "jammed"]], 9102: ["sprocket"]})]))
    assert codes(m, "RuntimeError: the gizmo is jammed again\n") == [(9101, "likely")]
    assert codes(m, "the gizmo is jammed again\n") == []  # not failure-shaped: no diagnosis
    assert codes(m, "2024-05-09 17:35:49,123 - INFO - x - RuntimeError: the gizmo is jammed\n") == []  # handled
    found = [e for e in events(m, "RuntimeError: the gizmo is jammed\n") if isinstance(e, Match)]
    assert found[0].words == ("gizmo", "jammed")


def test_a_bare_assertion_reads_its_statement(tmp_path):
    m = Matcher(kbmod.load([_user_kb(tmp_path, {9101: [["assert", "gizmo_count"]]})]))
    tb = 'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n    assert gizmo_count < 8\nAssertionError\n'
    assert codes(m, tb) == [(9101, "likely")]


def test_the_most_specific_hint_wins_and_a_tie_is_no_answer(tmp_path):
    m = Matcher(kbmod.load([_user_kb(tmp_path, {9101: ["gizmo"], 9102: [["gizmo", "jammed"]], 9103: ["sprocket"]})]))
    assert codes(m, "RuntimeError: gizmo jammed\n") == [(9102, "likely")]
    (tmp_path / "tie").mkdir()
    m = Matcher(kbmod.load([_user_kb(tmp_path / "tie", {9101: ["gizmo"], 9102: ["bolts"]})]))
    assert codes(m, "RuntimeError: gizmo bolts\n") == []  # as specific as each other


def test_kb_check_refuses_one_hint_in_two_entries(tmp_path):
    folder = _user_kb(tmp_path, {9101: [["gizmo", "jammed"]], 9102: [["jammed", "gizmo"]]})
    problems = check([folder])
    assert any("is also a hint of 9101" in p for p in problems), problems


def test_likely_and_exact_in_json_and_text(tmp_path):
    folder = _user_kb(tmp_path, {9101: [["gizmo", "jammed"]]})
    log = tmp_path / "t.log"
    log.write_text("widget-9101-exact\nRuntimeError: the gizmo is jammed\n")
    doc = json.loads(errmap("scan", "--kb", str(folder), "--format", "json", str(log)).stdout)
    assert [(d["errno"], d["confidence"]) for d in doc["diagnoses"]] == [(9101, "exact")]
    log.write_text("RuntimeError: the gizmo is jammed\n")
    doc = json.loads(errmap("scan", "--kb", str(folder), "--format", "json", str(log)).stdout)
    assert [(d["errno"], d["confidence"], d["hint"]) for d in doc["diagnoses"]] == [(9101, "likely", ["gizmo", "jammed"])]
    text = errmap("scan", "--kb", str(folder), str(log)).stdout.decode()
    assert "likely: gizmo + jammed" in text


def test_a_failed_run_is_never_no_error_found(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("usage: train.py [-h] [--lr LR]\ntrain.py: error: unrecognized arguments: --lrr 1e-5\n")
    proc = errmap("scan", str(log))
    assert proc.returncode == 1 and b"No error found" not in proc.stdout
    assert b"unrecognized arguments" in proc.stdout
