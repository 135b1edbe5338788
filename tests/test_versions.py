"""Advice that knows the run's versions: releases read from a log, steps held to the releases they name, fix links
held to where their merge and release were seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import errmap
from errmap.kb import versions
from errmap.kb.check import check


@pytest.mark.parametrize("line, found", [
    # vLLM's engine banners (V0 llm_engine.py, V1 core.py) and server banner
    ("INFO 12-02 08:41:31 llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with config: model='/m'",
     [("vllm", "0.6.3.post1")]),
    ("INFO 05-09 17:35:49 [core.py:61] Initializing a V1 LLM engine (v0.8.5) with config: model='/m'", [("vllm", "0.8.5")]),
    ("INFO 05-09 17:35:49 api_server.py:712] vLLM API server version 0.10.2", [("vllm", "0.10.2")]),
    # DeepSpeed's start-up (deepspeed/__init__.py)
    ("[2024-01-22 16:50:44,316] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.0, git-hash=unknown, "
     "git-branch=unknown", [("deepspeed", "0.14.0")]),
    # pip
    ("Successfully installed flash_attn-2.7.4.post1 verl-0.4.1 torch-2.4.0+cu121 wheel-0.45.1",
     [("flash-attn", "2.7.4.post1"), ("verl", "0.4.1"), ("torch", "2.4.0+cu121")]),
    ("Requirement already satisfied: transformers>=4.40 in /usr/lib/python3/site-packages (4.46.3)",
     [("transformers", "4.46.3")]),
    # collect_env (PyTorch's, vLLM's) and `transformers env`, as pasted in bug reports
    ("PyTorch version: 2.4.0+cu121", [("torch", "2.4.0+cu121")]),
    ("[pip3] torch==2.4.0", [("torch", "2.4.0")]),
    ("vLLM Version: 0.6.3", [("vllm", "0.6.3")]),
    ("- `transformers` version: 4.46.3", [("transformers", "4.46.3")]),
    ("Successfully installed numpy-1.26.4", []),  # a package no step names
])
def test_releases_read_from_a_line(line, found):
    assert versions.in_line(line) == found


def test_releases_read_from_a_frame_path():
    assert versions.in_path("/opt/conda/lib/python3.10/site-packages/vllm-0.6.3-py3.10-linux-x86_64.egg/vllm/x.py") == \
        ("vllm", "0.6.3")
    assert versions.in_path("/home/u/verl-0.4.1/verl/trainer/main_ppo.py") == ("verl", "0.4.1")
    assert versions.in_path("/home/u/my-env-3/lib/x.py") is None


@pytest.mark.parametrize("spec, version, holds", [
    ("<0.6", "0.5.4", True), ("<0.6", "0.6.0", False), ("<0.6", "0.6.0rc1", True),
    (">=0.3,<0.6", "0.2.9", False), (">=0.3,<0.6", "0.4.1", True),
    ("==0.5", "0.5.3", True), ("==0.5", "0.6.0", False), (">=2.1", "2.4.0+cu121", True),
    ("", "9.9", True), (">=0.10.2", "0.10.1.post2", False),
])
def test_specifiers(spec, version, holds):
    assert versions.holds(spec, version) is holds


def _entry(folder: Path, **extra) -> Path:
    folder.mkdir(exist_ok=True)
    entry = {
        "errno": 9201, "slug": "gizmo-jammed", "title": "The gizmo jammed", "group": "Tests", "role": "root",
        "summary": "A gizmo jammed in a test.",
        "anchors": [{"literal": "GizmoJammedError", "regex": "GizmoJammedError: (?P<what>.+)", "source": "tests"}],
        "cause": "The gizmo jammed on {what}.",
        "fix": [{"text": "verl before 0.6: set `actor_rollout_ref.rollout.name=hf`.", "stack": "verl",
                 "versions": {"verl": "<0.6"}, "seen": "verl v0.5.0 verl/workers/rollout; v0.6.0 registry"},
                {"text": "verl 0.6 and later: set `actor_rollout_ref.rollout.name=vllm`.", "stack": "verl",
                 "versions": {"verl": ">=0.6"}, "seen": "verl v0.6.0 verl/workers/rollout"},
                "Unjam it."],
        "links": [{"url": "https://example.org/fix", "kind": "fix", "title": "vLLM: unjam gizmos",
                   "merged": "example/vllm abc1234 (#1) on main", "released_in": "vllm 0.6.5"}],
        **extra,
    }
    (folder / "9201-gizmo-jammed.yaml").write_text(json.dumps(entry))
    return folder


def _log(tmp_path: Path, *lines: str) -> Path:
    log = tmp_path / "train.log"
    log.write_text("\n".join([*lines, "Traceback (most recent call last):",
                              '  File "/usr/lib/python3/site-packages/verl/trainer/main_ppo.py", line 9, in main',
                              "    run()", "GizmoJammedError: the third sprocket", ""]))
    return log


def _scan(folder: Path, log: Path) -> dict:
    return json.loads(errmap("scan", "--kb", str(folder), "--format", "json", str(log)).stdout)


def test_steps_hold_for_the_release_the_log_names(tmp_path):
    folder = _entry(tmp_path / "kb")
    old = _scan(folder, _log(tmp_path, "Successfully installed verl-0.4.1"))["diagnoses"][0]
    new = _scan(folder, _log(tmp_path, "Successfully installed verl-0.6.0"))["diagnoses"][0]
    unknown = _scan(folder, _log(tmp_path))["diagnoses"][0]
    assert any("name=hf" in s for s in old["fix"]) and not any("name=vllm" in s for s in old["fix"])
    assert not any("name=hf" in s for s in new["fix"]) and any("name=vllm" in s for s in new["fix"])
    assert [o["versions"] for o in new["fix_other_versions"]] == [{"verl": "<0.6"}]
    assert sum("rollout.name" in s for s in unknown["fix"]) == 2  # no release named: every step
    text = errmap("scan", "-v", "--kb", str(folder), str(_log(tmp_path, "Successfully installed verl-0.6.0"))).stdout.decode()
    assert "for verl <0.6 only" in text  # -v shows the step for other releases, marked


def test_a_release_before_the_fix_is_told_to_upgrade(tmp_path):
    folder = _entry(tmp_path / "kb")
    banner = "INFO 12-02 08:41:31 llm_engine.py:237] Initializing an LLM engine (v{}) with config: model='/m'"
    doc = _scan(folder, _log(tmp_path, banner.format("0.6.3")))
    assert doc["versions"]["vllm"] == {"version": "0.6.3", "from": "log", "file": str(tmp_path / "train.log"), "line": 1}
    assert doc["diagnoses"][0]["upgrade"] == [{"package": "vllm", "version": "0.6.3", "fixed_in": "0.6.5",
                                               "url": "https://example.org/fix"}]
    text = errmap("scan", "--kb", str(folder), str(tmp_path / "train.log")).stdout.decode()
    assert "This run has vllm 0.6.3; fixed in 0.6.5: upgrade." in text
    assert "fixed in vllm 0.6.5" in text
    assert _scan(folder, _log(tmp_path, banner.format("0.6.5")))["diagnoses"][0]["upgrade"] == []


@pytest.mark.parametrize("link, problem", [
    ({"kind": "fix", "title": "a title"}, "says where its merge was seen"),
    ({"kind": "fix", "title": "a title", "merged": "x/y abc (#1)"}, "says where its merge was seen"),
    ({"kind": "fix", "title": "a title", "merged": "x/y abc (#1)", "released_in": "soon"}, "is not '<package> <version>'"),
    ({"kind": "proposal", "title": "a title", "released_in": "vllm 0.6.5"}, "only a fix has"),
    ({"kind": "patch", "title": "a title"}, "Input should be 'fix', 'proposal', 'issue' or 'docs'"),
])
def test_kb_check_refuses_a_fix_without_its_evidence(tmp_path, link, problem):
    folder = _entry(tmp_path / "kb", links=[{"url": "https://example.org/x", **link}])
    assert any(problem in p for p in check([folder])), check([folder])


@pytest.mark.parametrize("step, problem", [
    ({"text": "set `actor_rollout_ref.rollout.name=hf`", "stack": "verl"}, "say for which releases it holds"),
    ({"text": "pass `--vllm_num_engines 0`", "stack": "openrlhf"}, "say for which releases it holds"),
    ({"text": "set `x.y`", "stack": "verl", "versions": {"verl": "<0.6"}}, "says where they were seen"),
    ({"text": "set `x.y`", "stack": "verl", "versions": {"verl": "soon"}, "seen": "x"}, "is no specifier"),
    ({"text": "set `x.y`", "stack": "verl", "versions": {"nonesuch": "<1"}, "seen": "x"}, "unknown package"),
])
def test_kb_check_refuses_a_versioned_step_without_its_versions(tmp_path, step, problem):
    folder = _entry(tmp_path / "kb", fix=[step])
    assert any(problem in p for p in check([folder])), check([folder])


def test_general_and_torch_steps_need_no_versions(tmp_path):
    folder = _entry(tmp_path / "kb", fix=["Set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.",
                                         {"text": "torchrun `--nproc_per_node 8`", "stack": "pytorch"}])
    assert not [p for p in check([folder]) if "9201" in p]


# The official KB: its verl steps and its released fixes, held to the run's releases.
P40_BF16 = ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            "Your Tesla P40 GPU has compute capability 6.1.")  # vllm/worker/worker.py _check_if_gpu_supports_dtype


def _official(tmp_path: Path, *lines: str) -> dict:
    log = tmp_path / "train.log"
    log.write_text("\n".join([*lines, "Traceback (most recent call last):",
                              '  File "/usr/lib/python3/site-packages/verl/workers/fsdp_workers.py", line 9, in init_model',
                              "    self.rollout = self._build_rollout()", P40_BF16, ""]))
    return json.loads(errmap("scan", "--format", "json", str(log)).stdout)


@pytest.mark.parametrize("installed, hf", [("verl-0.4.1", True), ("verl-0.5.0", True), ("verl-0.6.0", False),
                                           ("verl-0.9.1", False)])
def test_the_hf_rollout_only_for_the_verl_releases_that_have_it(tmp_path, installed, hf):
    doc = _official(tmp_path, f"Successfully installed {installed} torch-2.6.0")
    d = next(d for d in doc["diagnoses"] if d["errno"] == 1009)
    assert d["framework"] == "verl"
    assert any("rollout.name=hf" in s for s in d["fix"]) is hf
    assert any("rollout.name=hf" in s for s in [*d["fix"], d["cause"]]) is hf  # nowhere else either


def test_an_old_vllm_is_told_the_release_that_fixes_it(tmp_path):
    log = tmp_path / "rollout.log"
    log.write_text("INFO 12-02 08:41:31 [api_server.py:1801] vLLM API server version 0.11.0\n"
                   "AssertionError: Expandable segments are not compatible with memory pool. Please track "
                   "https://github.com/pytorch/pytorch/issues/147851 for the latest updates.\n")
    d = next(d for d in json.loads(errmap("scan", "--format", "json", str(log)).stdout)["diagnoses"] if d["errno"] == 1023)
    assert [(u["package"], u["version"], u["fixed_in"]) for u in d["upgrade"]] == [("vllm", "0.11.0", "0.20.1")]
    assert "This run has vllm 0.11.0; fixed in 0.20.1: upgrade." in errmap("scan", "-v", str(log)).stdout.decode()
