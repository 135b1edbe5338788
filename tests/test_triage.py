"""Root cause first: cascades across ranks, Ray sessions of many files, folded consequences."""

from __future__ import annotations

import shutil

from conftest import FIXTURES, scan_json

from errmap.scan.runs import ray_own


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


def test_a_failure_in_rays_own_logs_ranks_after_the_jobs_output(tmp_path):
    """Recorded: three nodes on one host. The second node's dashboard agent could not bind its default port
    (the head's agent holds it) and went on without its HTTP service; later that node's task ran out of
    GPU memory. Ray's housekeeping is reported, after the job's failure."""
    logs = FIXTURES / "sessions" / "ray-nodes-one-host" / "logs"
    doc = scan_json(logs)
    assert [d["errno"] for d in doc["diagnoses"]] == [1017, 1029]
    oom, port = doc["diagnoses"]
    assert "/worker-" in oom["file"] and port["file"].endswith("/dashboard_agent.log")
    assert port["captures"]["port"] == "52365"
    # Its ERROR records alone (no WARNING retries before them) still come after the job's failure.
    shutil.copytree(logs, tmp_path / "logs")
    agent = tmp_path / "logs" / "dashboard_agent.log"
    agent.write_text("".join(ln for ln in agent.read_text().splitlines(True) if "Retrying in" not in ln))
    assert [d["errno"] for d in scan_json(tmp_path / "logs")["diagnoses"]] == [1017, 1029]


def test_which_files_are_rays_own():
    for name in ("raylet.out", "raylet.1.err", "gcs_server.err", "dashboard_agent.log", "dashboard_JobHead.log",
                 "runtime_env_agent.log", "log_monitor.log", "ray_client_server.out",
                 "python-core-worker-c1b1f972da58618d0b406b524cccca724f6a6fac257507e57436fe10_18102.log"):
        assert ray_own(f"/tmp/ray/session_latest/logs/{name}") and ray_own(f"copied/{name}"), name
    assert ray_own("/tmp/ray/session_latest/logs/monitor.log") and not ray_own("run/monitor.log")
    for name in ("worker-c1b1f972-01000000-18102.err", "job-driver-raysubmit_1.log", "train.log"):
        assert not ray_own(f"/tmp/ray/session_latest/logs/{name}"), name


def test_repeated_lines_are_one_incident_with_a_count(tmp_path):
    line = "(WorkerDict pid=7, ip=10.0.0.{n}) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free.{rep}\n"
    text = "".join(line.format(n=n, rep=" [repeated 3x across cluster]" if n == 3 else "") for n in range(1, 5))
    (tmp_path / "r.log").write_text(text)
    (d,) = scan_json(tmp_path / "r.log")["diagnoses"]
    assert d["errno"] == 1017 and d["count"] == 6 and len(d["hosts"]) == 4


def test_a_wrappers_header_adds_no_likely_twin_of_the_error_it_wraps():
    """`RayTaskError(ModuleNotFoundError): ray::…` above the worker's own ModuleNotFoundError: one 1008, exact."""
    doc = scan_json(FIXTURES / "1008" / "ray-worker-module-missing.log")
    assert [(d["errno"], d["confidence"]) for d in doc["diagnoses"]] == [(1008, "exact")]
