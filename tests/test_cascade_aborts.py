"""A process's abort after a failure known in it (the NCCL watchdog's terminate and the interpreter's "Fatal Python
error: Aborted" after a collective timeout) is that failure's consequence: folded under it, not an unknown error, in
every output."""

from __future__ import annotations

import json

from conftest import FIXTURES, errmap

RAY_WATCHDOG = FIXTURES / "1025" / "verl-ray-watchdog-allgather.log"
OLD_WATCHDOG = FIXTURES / "1025" / "torchrun-watchdog-old-format.log"


def test_the_watchdogs_aborts_fold_under_the_timeout():
    doc = json.loads(errmap("scan", "--format", "json", str(RAY_WATCHDOG), str(OLD_WATCHDOG)).stdout)
    assert doc["unrecognized"] == []
    by_file = {(d["file"], d["errno"]): d for d in doc["diagnoses"]}
    ray = by_file[(str(RAY_WATCHDOG), 1025)]
    assert [(a["line"], a["message"]) for a in ray["aborts"]] == [
        (11, "terminate called after throwing an instance of 'c10::DistBackendError'"),
        (51, "Fatal Python error: Aborted")]
    old = by_file[(str(OLD_WATCHDOG), 1025)]
    assert [a["line"] for a in old["aborts"]] == [10]


def test_github_annotates_the_cascade_once_per_diagnosis():
    out = errmap("scan", "--format", "github", str(RAY_WATCHDOG)).stdout.decode().splitlines()
    assert [line.split("title=")[1].split("::")[0] for line in out] == ["errmap 1025 nccl-timeout", "errmap 1030 ray-worker-died"]


def test_text_and_watch_do_not_list_them_and_a_ray_prefix_does_not_hide_a_message():
    text = errmap("scan", str(RAY_WATCHDOG), env={"COLUMNS": "80"}).stdout.decode()
    assert "not in the knowledge base" not in text and "ter…" not in text and "Fat…" not in text
    watched = errmap("watch", input=RAY_WATCHDOG.read_bytes(), env={"COLUMNS": "80"})
    assert b"unrecognized" not in watched.stdout + watched.stderr
    # an unknown error beside a diagnosis keeps one row at 80 columns: its message starts there, the actor is left to -v
    segfault = errmap("scan", "fixtures/1030/ray-actor-segfault.log", env={"COLUMNS": "80"}).stdout.decode()
    row = next(line for line in segfault.splitlines() if "ray-actor-segfault.log:42" in line)
    assert "Fatal Python error: Segmentation" in row and len(row) <= 80


def test_an_abort_with_no_known_failure_in_its_process_is_still_an_error(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("(WorkerDict pid=7) terminate called after throwing an instance of 'c10::DistBackendError'\n"
                   "(WorkerDict pid=7) Fatal Python error: Aborted\n")
    doc = json.loads(errmap("scan", "--format", "json", str(log)).stdout)
    assert [u["line"] for u in doc["unrecognized"]] == [1, 2]
