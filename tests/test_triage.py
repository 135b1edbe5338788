"""Root cause first: cascades across ranks, Ray sessions of many files, folded consequences."""

from __future__ import annotations

from conftest import FIXTURES, scan_json


def tops(doc: dict) -> list[int]:
    return [d["errno"] for d in doc["diagnoses"] if d["caused_by"] is None]


def test_oom_on_one_rank_comes_before_what_it_set_off():
    """Recorded on an H200: rank 1 runs out of memory, rank 0's collective fails, torchrun gives up."""
    doc = scan_json(FIXTURES / "1031" / "gpu-gloo-oom-cascade.log")
    first = doc["diagnoses"][0]
    assert first["errno"] == 1017 and first["ranks"] == [1]
    child = next(d for d in doc["diagnoses"] if d["errno"] == 1031)
    assert child["caused_by"] == 1017 and 1031 in first["consequences"]
    assert tops(doc)[0] == 1017


def test_ray_session_folder_and_driver_log():
    """A real local Ray run: one actor's ModuleNotFoundError, another actor's process dies."""
    session = FIXTURES / "sessions" / "ray-cpu"
    doc = scan_json(session / "driver.log", session / "logs")
    codes = [d["errno"] for d in doc["diagnoses"]]
    assert codes[0] == 1008 and 1030 in codes
    first = doc["diagnoses"][0]
    assert first["captures"].get("module") == "flash_attn"
    assert len(first["files"]) >= 2  # the driver and the worker's own .err file
    assert any(ev.get("actor") == "WorkerDict" or "worker-" in ev["file"] for ev in first["evidence"])
    assert len(doc["sources"]) > 20  # every file of the session was read


def test_repeated_lines_are_one_incident_with_a_count(tmp_path):
    line = "(WorkerDict pid=7, ip=10.0.0.{n}) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free.{rep}\n"
    text = "".join(line.format(n=n, rep=" [repeated 3x across cluster]" if n == 3 else "") for n in range(1, 5))
    (tmp_path / "r.log").write_text(text)
    (d,) = scan_json(tmp_path / "r.log")["diagnoses"]
    assert d["errno"] == 1017 and d["count"] == 6 and len(d["hosts"]) == 4
