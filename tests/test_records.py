"""Real logs as they come: messages behind unknown prefixes, any level, traceback frames, crashes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import errmap
from errmap.scan.lines import peel
from errmap.scan.events import Match, Unrecognized
from errmap.scan.scanner import scan_chunks

TRITON = "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: 65536. Reducing block sizes or `num_stages` may help."


def events(matcher, text: str):
    return list(scan_chunks(matcher, "t.log", [text.encode()]))


def codes(matcher, text: str) -> list[int]:
    return [e.entry.errno for e in events(matcher, text) if isinstance(e, Match)]


@pytest.mark.parametrize(
    "prefix, fields",
    [
        ("myjob-1  | ", {"host": "myjob-1"}),
        ("[pod/trainer-0/main] ", {"host": "trainer-0"}),
        ("pod/trainer-0 ", {"host": "trainer-0"}),
        ("3: ", {"rank": 3}),
        ("Dec 02 10:00:01 node1 python3[4242]: ", {"host": "node1", "pid": 4242, "actor": "python3", "time": "Dec 02 10:00:01"}),
        ("[16:10:33] stdout/INFO  ", {"time": "16:10:33", "level": "INFO"}),
        ("2016-10-06T00:17:09.669794202Z stdout F ", {"time": "2016-10-06T00:17:09.669794202Z"}),  # CRI log file
        ("ERROR:root:", {"level": "ERROR"}),  # Python logging's BASIC_FORMAT "%(levelname)s:%(name)s:%(message)s"
        ("ERROR:torch.distributed.elastic.multiprocessing.api:", {"level": "ERROR"}),
        # "%(asctime)s - %(levelname)s - %(name)s - " with transformers' example scripts' datefmt, and the other order
        ("12/04/2026 05:00:00 - ERROR - __main__ - ", {"level": "ERROR", "time": "12/04/2026 05:00:00"}),
        ("2026-12-04 05:00:00,123 - root - ERROR - ", {"level": "ERROR", "time": "2026-12-04 05:00:00,123"}),
        ("[ERROR|2026-12-04 05:00:00] llamafactory.train.tuner:51 >> ", {"level": "ERROR", "time": "2026-12-04 05:00:00"}),
        ("2026-12-04T05:00:00+08:00 stderr P ", {"time": "2026-12-04T05:00:00+08:00"}),
        ("[12-16 14:27:10 TP0] ", {"time": "12-16 14:27:10"}),
        ("[33m", {}),
    ],
)
def test_prefixes_are_recorded_and_never_hide_the_message(matcher, prefix, fields):
    line = peel("t.log", 1, prefix + TRITON)
    assert line.text == TRITON
    for k, v in fields.items():
        assert getattr(line, k) == v
    assert codes(matcher, prefix + TRITON + "\n") == [1012]


@pytest.mark.parametrize("prefix", ["some-tool >> ", "训练出错：", "[步骤 3] 错误 ", "{\"msg\": \"", "(train) [x=1] | "])
def test_a_message_is_found_after_a_prefix_nobody_listed(matcher, prefix):
    assert codes(matcher, prefix + TRITON + "\n") == [1012]


def test_a_message_start_is_not_inside_a_name(matcher):
    # `^` in an anchor is a message start: not the middle of an identifier or a dotted path
    assert codes(matcher, "myRuntimeError: No CUDA GPUs are available\n") == []
    assert codes(matcher, "RuntimeError: No CUDA GPUs are available\n") == [1004]


def test_a_failure_logged_at_info_counts(matcher):
    assert codes(matcher, "2026-12-02 10:00:00,001 INFO runner.py:12 -- " + TRITON + "\n") == [1012]


def test_a_guard_keeps_a_look_alike_out(matcher):
    # torch inductor's max-autotune rejects a config and goes on; the InductorError form is fatal
    rejected = "[3/0] RuntimeError: No valid triton configs. OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376.\n"
    fatal = "torch._inductor.exc.InductorError: RuntimeError: No valid triton configs. OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376.\n"
    assert codes(matcher, rejected) == []
    assert codes(matcher, fatal) == [1012]


DATASET_TB = """Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 733, in __next__
    data = self._next_data()
  File "/opt/venv/lib/python3.11/site-packages/verl/utils/dataset/rl_dataset.py", line 341, in __getitem__
    messages = self._build_messages(row_dict)
  File "/opt/venv/lib/python3.11/site-packages/verl/utils/dataset/rl_dataset.py", line 297, in _build_messages
    messages: list = example[self.prompt_key]
KeyError: 'instruction'
"""


def test_a_frame_rule_reads_the_traceback(matcher):
    assert codes(matcher, DATASET_TB) == [1033]
    # the same KeyError elsewhere is not a missing column: it stays an unrecognized failure
    (e,) = events(matcher, "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nKeyError: 'instruction'\n")
    assert isinstance(e, Unrecognized) and e.type == "KeyError"


def test_frames_far_back_do_not_count(matcher):
    far = DATASET_TB.replace("KeyError: 'instruction'\n", "") + "step\n" * 300 + "KeyError: 'instruction'\n"
    assert codes(matcher, far) == []


def test_a_quoted_raise_reads_as_its_message(matcher):
    cut = '  File "/opt/vllm/worker.py", line 9, in f\n    raise RuntimeError("No CUDA GPUs are available")\n'
    assert codes(matcher, cut) == [1004]


def test_a_traceback_cut_before_its_exception_line_is_a_failure(tmp_path):
    log = tmp_path / "cut.log"
    log.write_text("step 1 loss 0.4\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\n")
    proc = errmap("scan", "--format", "json", str(log))
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["diagnoses"] == []
    assert doc["unrecognized"][0]["line"] == 2


def test_ipython_traceback_header_names_the_type(matcher):
    evs = events(matcher, "-" * 75 + "\nRuntimeError                              Traceback (most recent call last)\nCell In[21], line 1\n----> 1 trainer.train()\n")
    assert [(e.type, e.line.lineno) for e in evs] == [("RuntimeError", 2)]


def test_a_cut_traceback_known_from_its_frames_ranks_after_a_read_message(matcher):
    from errmap.scan.triage import Triage

    tb = ('Traceback (most recent call last):\n  File "/v/torch/distributed/checkpoint/state_dict_loader.py", line 281, in local_step\n'
          "    local_plan = planner.create_local_plan()\n")
    triage = Triage()
    for e in events(matcher, tb):
        triage.add(e)
    assert [i.entry.errno for i in triage.ranked()] == [1046]
    triage = Triage()
    for e in events(matcher, tb + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"):
        triage.add(e)
    assert [i.entry.errno for i in triage.ranked()][0] == 1017


def _crash(code: str, *flags: str) -> bytes:
    """A real crash of a real interpreter, as the shell running it reports it."""
    cmd = f"{sys.executable} {' '.join(flags)} -c '{code}'; echo after"
    return subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60).stdout


@pytest.mark.parametrize("flags, kind", [((), "Segmentation fault"), (("-X", "faulthandler"), "Fatal Python error")])
def test_a_real_segfault_is_an_unrecognized_failure(flags, kind):
    out = _crash("import ctypes; ctypes.string_at(0)", *flags)
    proc = errmap("scan", "--format", "json", "-", input=out)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1, out
    assert any(u["type"].startswith(kind) for u in doc["unrecognized"]), (out, doc["unrecognized"])
    text = errmap("scan", "-", input=out).stdout.decode()
    assert "No error found" not in text


@pytest.mark.parametrize(
    "line, found",
    [
        ("step 12 | loss=nan | lr=1e-5", True),
        ("[5000] model_grad_norm nan / value_grad_norm 40.3", True),
        ("train/loss: nan", True),
        ("critic/rewards/mean:nan - actor/pg_loss:0.1", True),
        ("Train epoch [2/5]: 100%|####| 8/8 [00:10<00:00, reward=nan]", True),
        ("step 12 | loss=0.4312 | grad_norm=0.83", False),
        ("config: max_grad_norm=inf clip=nan_to_num", False),
        ("loss_scale=nanoseconds", False),
    ],
)
def test_a_nan_metric_is_a_diverged_run(matcher, line, found):
    assert (codes(matcher, line + "\n") == [1045]) is found


def test_explain_and_docs_show_frame_rules_and_guards(kb, matcher):
    from errmap.commands.docs import errno_page

    assert "only inside a traceback with a frame matching" in errmap("explain", "1033").stdout.decode()
    assert "not on a line matching" in errmap("explain", "1012").stdout.decode()
    assert "only inside a traceback with a frame matching" in errno_page(kb.entries[1033], kb, matcher, None)


def test_a_gpu_error_no_anchor_knows_is_unrecognized_mid_line(matcher):
    (e,) = events(matcher, "[PG 0 Rank 12] Process group watchdog thread terminated with exception: CUDA error: some new fault\n")
    assert isinstance(e, Unrecognized) and e.type == "CUDA error" and e.message == "some new fault"


FRAMES = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    raise ValueError("shard 3 is empty")\n'


@pytest.mark.parametrize("prefix", ["wandb: ", "> ", "[ERROR|trainer.py:9] x >> ", "step 3 | "])
def test_a_traceback_ending_behind_an_unknown_prefix_is_still_a_failure(matcher, prefix):
    found = [e for e in events(matcher, FRAMES + prefix + "ValueError: shard 3 is empty\n") if isinstance(e, Unrecognized)]
    assert [(e.type, e.message, e.line.lineno) for e in found] == [("ValueError", "shard 3 is empty", 4)]


def test_a_quoted_raise_does_not_end_the_traceback(matcher):
    # the frame's source line reads like the exception but is not it: a log cut after it is still a failure
    found = [e for e in events(matcher, FRAMES) if isinstance(e, Unrecognized)]
    assert [e.message for e in found] == ["the log ends inside a traceback, before its exception line"]


def _docker(tmp_path, texts: list[str], name: str = "c-json.log"):
    # Docker's json-file logging driver: one record a line, its "log" ending in the newline unless Docker split the
    # line (docs.docker.com/engine/logging/drivers/json-file/)
    path = tmp_path / name
    path.write_text("".join(json.dumps({"log": t, "stream": "stderr", "time": "2026-12-04T05:00:00.123456789Z"},
                                       separators=(",", ":")) + "\n" for t in texts))
    return path


def test_a_docker_json_file_log_is_read_as_its_text(tmp_path):
    half = len(TRITON) // 2
    path = _docker(tmp_path, ["step 1\n", 'File "x.py", "quoted"\n', TRITON[:half], TRITON[half:] + "\n"])
    doc = json.loads(errmap("scan", "--format", "json", str(path)).stdout)
    assert [d["errno"] for d in doc["diagnoses"]] == [1012]  # the line Docker split is joined again
    assert doc["diagnoses"][0]["evidence"][0]["text"] == TRITON and doc["diagnoses"][0]["line"] == 3
    stdin = subprocess.run([sys.executable, "-m", "errmap", "scan", "-"], input=path.read_bytes(), capture_output=True)
    assert stdin.returncode == 1 and b"1012" in stdin.stdout


def test_lines_that_are_not_docker_records_pass_through(tmp_path):
    from errmap.scan.source import MAX_RECORD, DockerJson

    dj = DockerJson()
    out = dj.feed(b'{"log":"a\\n","stream":"stdout","time":"t"}\nplain line\n{"log": broken\n') + dj.finish()
    assert out == b'a\nplain line\n{"log": broken\n'
    dj = DockerJson()
    assert dj.feed(b"plain\n") == b"plain\n"  # not a json-file log: every byte as it came
    dj = DockerJson()
    dj.feed(b'{"log":"x')
    assert len(dj.feed(b"y" * (MAX_RECORD + 1))) > MAX_RECORD  # a record without an end is not held without bound
