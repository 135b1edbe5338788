"""Confirmation rules: facts plus captures give confirmed, refuted or unverified, with reasons."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from errmap.kb import schema
from errmap.kb.model import Entry
from errmap.probes.base import Fact
from errmap.probes.verify import decide

from conftest import CATALOG, ROOT, errmap
from probe_files import preference_parquet, verl_parquet

ANCHOR = [{"literal": "boom", "regex": r"boom (?P<n>\d+) (?P<col>\w+)", "source": "test"}]


def entry(*checks: dict, probes: list[str] | None = None) -> Entry:
    return Entry.from_dict(schema.Entry.model_validate({
        "errno": 9100, "slug": "t", "title": "a test entry", "group": "test", "role": "root",
        "summary": "a test entry for rules", "anchors": ANCHOR, "cause": "a cause for the test",
        "fix": ["fix it"], "links": [{"url": "https://example.org/x", "kind": "docs", "title": "docs"}],
        "probes": probes or [], "checks": list(checks),
    }).model_dump())


def fact(name, value):
    return Fact(name, value)


CAP_LT8 = {"probe": "gpu.capability", "op": "<", "value": 8.0, "verdict": "confirmed", "says": "old GPU"}
CAP_GE8 = {"probe": "gpu.capability", "op": ">=", "value": 8.0, "verdict": "refuted", "says": "new GPU"}


@pytest.mark.parametrize("caps,want", [([7.0], "confirmed"), ([9.0], "refuted"), ([8.0, 8.6], "refuted"), ([7.5, 9.0], "confirmed")])
def test_any_gpu_confirms_all_gpus_refute(caps, want):
    v = decide(entry(CAP_LT8, CAP_GE8), {}, {"gpu.capability": fact("gpu.capability", caps)})
    assert v.verdict == want
    assert v.reasons and ("old GPU" if want == "confirmed" else "new GPU") in v.reasons[0]


def test_unknown_fact_is_unverified_with_its_reason():
    v = decide(entry(CAP_LT8, CAP_GE8), {}, {"gpu.capability": Fact("gpu.capability", known=False, reason="no NVIDIA driver")})
    assert v.verdict == "unverified"
    assert v.reasons == ["gpu.capability: unknown (no NVIDIA driver)"]


def test_capture_comparison_uses_numbers():
    rules = [
        {"probe": "gpu.shared_memory", "op": "<", "capture": "n", "verdict": "confirmed", "says": "too small"},
        {"probe": "gpu.shared_memory", "op": ">=", "capture": "n", "verdict": "refuted", "says": "big enough"},
    ]
    e = entry(*rules)
    smem = {"gpu.shared_memory": fact("gpu.shared_memory", [232448])}
    assert decide(e, {"n": "81920"}, smem).verdict == "refuted"
    assert decide(e, {"n": "262144"}, smem).verdict == "confirmed"
    assert decide(e, {}, smem).verdict == "unverified"  # the capture is missing: no rule can fire


def test_versions_compare_as_versions_not_floats():
    rules = [
        {"probe": "driver.cuda_version", "op": "<", "against": "torch.cuda_version", "verdict": "confirmed", "says": "driver too old"},
        {"probe": "driver.cuda_version", "op": ">=", "against": "torch.cuda_version", "verdict": "refuted", "says": "driver new enough"},
    ]
    e = entry(*rules)
    facts = lambda d, t: {"driver.cuda_version": fact("driver.cuda_version", d), "torch.cuda_version": fact("torch.cuda_version", t)}
    assert decide(e, {}, facts("12.9", "12.10")).verdict == "confirmed"
    assert decide(e, {}, facts("13.0", "12.8")).verdict == "refuted"
    assert decide(e, {}, facts("11.4", None)).verdict == "unverified"  # CPU torch: nothing to compare


def test_missing_and_present_with_and_without_target():
    rules = [
        {"probe": "data.columns", "op": "missing", "capture": "col", "verdict": "confirmed", "says": "no such column"},
        {"probe": "data.columns", "op": "present", "capture": "col", "verdict": "refuted", "says": "column is there"},
    ]
    e = entry(*rules)
    cols = {"data.columns": fact("data.columns", {"prompt": "string", "chosen": "string"})}
    assert decide(e, {"col": "reward_model"}, cols).verdict == "confirmed"
    assert decide(e, {"col": "prompt"}, cols).verdict == "refuted"
    procs = entry({"probe": "gpu.processes", "op": "present", "verdict": "confirmed", "says": "others hold memory"})
    assert decide(procs, {}, {"gpu.processes": fact("gpu.processes", [])}).verdict == "unverified"
    assert decide(procs, {}, {"gpu.processes": fact("gpu.processes", [{"gpu": 0, "pid": 7, "used_mib": 900}])}).verdict == "confirmed"


def test_fields_inside_facts_and_booleans():
    e = entry({"probe": "data.prompt_format", "field": "chat", "op": "==", "value": False, "verdict": "confirmed", "says": "not chat"},
              {"probe": "data.prompt_format", "field": "chat", "op": "==", "value": True, "verdict": "refuted", "says": "chat"})
    assert decide(e, {}, {"data.prompt_format": fact("data.prompt_format", {"chat": False})}).verdict == "confirmed"
    assert decide(e, {}, {"data.prompt_format": fact("data.prompt_format", {"chat": True})}).verdict == "refuted"


def test_check_model_rejects_two_targets_and_missing_target():
    with pytest.raises(ValueError):
        schema.Check.model_validate({"probe": "gpu.count", "op": "<", "value": 1, "capture": "n", "verdict": "confirmed", "says": "xx x"})
    with pytest.raises(ValueError):
        schema.Check.model_validate({"probe": "gpu.count", "op": "<", "verdict": "confirmed", "says": "xx x"})


def test_the_1012_rules_of_the_kb(kb):
    e = kb.get(1012)
    smem = lambda v: {"gpu.shared_memory": fact("gpu.shared_memory", v), "gpu.capability": fact("gpu.capability", [9.0])}
    assert decide(e, {"required": "262144", "limit": "232448"}, smem([232448])).verdict == "confirmed"
    assert decide(e, {"required": "81920", "limit": "65536"}, smem([232448])).verdict == "refuted"


def test_codes_whose_catalog_lists_probes_have_rules(kb):
    if not CATALOG.is_file():
        pytest.skip(f"{CATALOG} is not in this checkout")
    codes = yaml.safe_load(CATALOG.read_text())["codes"]
    missing = [c["errno"] for c in codes if c.get("probes") and kb.get(c["errno"]) is not None and not kb.get(c["errno"]).checks]
    assert not missing, f"entries without checks: {missing}"


def test_every_check_runs_without_crashing_on_this_machine(kb):
    from errmap.probes.verify import Prober

    prober = Prober()
    for e in kb:
        caps = {name: "1" for name in e.captures}
        v = prober.verify(e, caps)
        assert v.verdict in ("confirmed", "refuted", "unverified")
        assert v.reasons


# ---------------------------------------------------------------- the CLI, end to end

USER_ENTRY = textwrap.dedent("""\
    errno: 9033
    slug: test-missing-column
    title: Test dataset lacks a column
    group: test
    role: root
    summary: A test of the data probes through scan --probe.
    anchors:
      - literal: "KeyError: '"
        regex: "^KeyError: '(?P<key>\\\\w+)'"
        source: test
    cause: The data file has no {key} column.
    fix: ["add it"]
    links: [{url: "https://example.org/t", kind: docs, title: test docs}]
    probes: [data.columns]
    checks:
      - {probe: data.columns, op: missing, capture: key, verdict: confirmed, says: "the parquet has no such column"}
      - {probe: data.columns, op: present, capture: key, verdict: refuted, says: "the parquet has this column"}
    """)


@pytest.fixture()
def user_kb(tmp_path) -> Path:
    d = tmp_path / "kb"
    d.mkdir()
    (d / "9033-test-missing-column.yaml").write_text(USER_ENTRY)
    return d


def _scan_probe(log: Path, user_kb: Path, *extra: str) -> dict:
    proc = errmap("scan", "--probe", "--format", "json", "--kb", str(user_kb), *extra, str(log))
    assert proc.returncode == 1, proc.stderr.decode()
    (d,) = [d for d in json.loads(proc.stdout)["diagnoses"] if d["errno"] == 9033]
    return d


def test_scan_probe_reads_the_parquet_named_in_the_log(tmp_path, user_kb):
    data = preference_parquet(tmp_path / "train.parquet")
    log = tmp_path / "run.log"
    log.write_text(f"+ python3 -m verl.trainer.main_ppo data.train_files={data} data.val_files={data} trainer.n_gpus_per_node=1\n"
                   "Traceback (most recent call last):\n"
                   "KeyError: 'reward_model'\n")
    d = _scan_probe(log, user_kb)
    assert d["verdict"] == "confirmed", d
    assert "reward_model" in d["verdict_reasons"][0]
    assert d["facts"]["data.columns"]["value"] == {"prompt": "string", "chosen": "string", "rejected": "string"}


def test_scan_probe_reads_verls_printed_config_and_refutes(tmp_path, user_kb):
    data = verl_parquet(tmp_path / "train.parquet")
    log = tmp_path / "run.log"
    log.write_text("(TaskRunner pid=7) {'actor_rollout_ref': {'model': {'path': '/m'}},\n"
                   f"(TaskRunner pid=7)  'data': {{'train_files': '{data}',\n"
                   "(TaskRunner pid=7)           'val_files': '/nowhere/test.parquet'}}\n"
                   "KeyError: 'reward_model'\n")
    d = _scan_probe(log, user_kb)
    assert d["verdict"] == "refuted", d


def test_scan_probe_data_option_wins_and_text_output_shows_verdict(tmp_path, user_kb):
    data = preference_parquet(tmp_path / "pref.parquet")
    log = tmp_path / "run.log"
    log.write_text("KeyError: 'reward_model'\n")
    d = _scan_probe(log, user_kb, "--data", str(data))
    assert d["verdict"] == "confirmed"
    proc = errmap("scan", "--probe", "--kb", str(user_kb), "--data", str(data), str(log))
    out = proc.stdout.decode()
    assert "confirmed" in out and "facts: data.columns=" in out


def test_scan_probe_from_stdin_and_watch(tmp_path, user_kb):
    data = preference_parquet(tmp_path / "pref.parquet")
    text = f"data.train_files={data}\nKeyError: 'prompt'\n".encode()
    proc = errmap("scan", "--probe", "--format", "json", "--kb", str(user_kb), "-", input=text)
    (d,) = [d for d in json.loads(proc.stdout)["diagnoses"] if d["errno"] == 9033]
    assert d["verdict"] == "refuted"
    proc = errmap("watch", "--probe", "--format", "json", "--kb", str(user_kb), input=text)
    (d,) = [d for d in json.loads(proc.stdout)["diagnoses"] if d["errno"] == 9033]
    assert d["verdict"] == "refuted" and "facts" in d
    proc = errmap("watch", "--probe", "--kb", str(user_kb), input=text)
    assert "refuted" in proc.stdout.decode()


def test_scan_without_probe_has_no_verdict(tmp_path, user_kb):
    log = tmp_path / "run.log"
    log.write_text("KeyError: 'prompt'\n")
    proc = errmap("scan", "--format", "json", "--kb", str(user_kb), str(log))
    (d,) = [d for d in json.loads(proc.stdout)["diagnoses"] if d["errno"] == 9033]
    assert "verdict" not in d and "facts" not in d


def test_captured_sizes_are_compared_in_the_fields_unit():
    from errmap.probes.verify import in_field_unit

    assert in_field_unit("180.00 GiB", "total_mib") == 180 * 1024
    assert in_field_unit("512 MiB", "free_bytes") == 512 * 1024 * 1024
    assert in_field_unit("2GB", "free_gib") == pytest.approx(2e9 / (1 << 30))
    assert in_field_unit("180.00 GiB", None) == "180.00 GiB" and in_field_unit("0.9", "free_fraction") == "0.9"
    e = entry({"probe": "gpu.memory", "field": "total_mib", "op": "<", "capture": "n", "verdict": "confirmed", "says": "too big"})
    mem = {"gpu.memory": fact("gpu.memory", [{"total_mib": 143771, "free_mib": 143000}])}
    assert decide(e, {"n": "180.00 GiB"}, mem).verdict == "confirmed"
    assert decide(e, {"n": "2.00 GiB"}, mem).verdict == "unverified"


# ---------------------------------------------------------------- the KB's own rules, code by code

F = Fact
RULE_CASES = [
    # errno, captures, facts, verdict
    (1001, {}, {"torch.gpu_supported": [False]}, "confirmed"),
    (1002, {}, {"torch.gpu_supported": [True, False]}, "confirmed"),
    (1003, {}, {"driver.cuda_version": "12.2", "torch.cuda_version": "12.8"}, "confirmed"),
    (1003, {}, {"driver.cuda_version": "13.0", "torch.cuda_version": "12.8"}, "refuted"),
    (1004, {}, {"gpu.count": 0, "torch.cuda_build": True, "env.cuda_visible_devices": None}, "confirmed"),
    (1004, {}, {"gpu.count": 1, "torch.cuda_build": True, "env.cuda_visible_devices": ""}, "confirmed"),
    (1005, {}, {"gpu.count": 1, "run.config": {}}, "confirmed"),
    (1005, {}, {"gpu.count": 4, "run.config": {"trainer.n_gpus_per_node": "8"}}, "confirmed"),
    (1006, {}, {"nvcc.version": "13.0", "torch.cuda_version": "12.8"}, "confirmed"),
    (1006, {}, {"nvcc.version": "12.8", "torch.cuda_version": "12.8"}, "refuted"),
    (1007, {"library": "x.so"}, {"module.importable": {"module": "x", "importable": False}}, "confirmed"),
    (1007, {"library": "x.so"}, {"module.importable": {"module": "x", "importable": True}}, "refuted"),
    (1008, {"module": "verl"}, {"module.importable": {"module": "verl", "importable": False}}, "confirmed"),
    (1008, {"module": "verl"}, {"module.importable": {"module": "verl", "importable": True}}, "refuted"),
    (1009, {}, {"gpu.capability": [7.0]}, "confirmed"),
    (1009, {}, {"gpu.capability": [9.0]}, "refuted"),
    (1010, {}, {"gpu.capability": [7.5]}, "confirmed"),
    (1010, {}, {"gpu.capability": [8.0, 9.0]}, "refuted"),
    (1011, {}, {"pkg.versions": {"flash-attn": None}}, "confirmed"),
    (1012, {"required": "262144"}, {"gpu.shared_memory": [232448]}, "confirmed"),
    (1012, {"required": "65536"}, {"gpu.shared_memory": [232448]}, "refuted"),
    (1013, {}, {"gpu.capability": [6.1]}, "confirmed"),
    (1014, {}, {"pkg.conflicts": ["vllm 0.8.5 requires torch==2.6.0, but torch 2.7.0 is installed"]}, "confirmed"),
    (1015, {}, {"model.vocab": {"model_vocab": 32000, "tokenizer_vocab": 32005, "fits": False}}, "confirmed"),
    (1017, {"tried": "180.00 GiB"}, {"gpu.memory": [{"total_mib": 143771, "free_mib": 143000, "free_fraction": 0.99}], "gpu.processes": []}, "confirmed"),
    (1017, {}, {"gpu.memory": [{"total_mib": 81559, "free_mib": 2000, "free_fraction": 0.02}], "gpu.processes": []}, "confirmed"),
    (1018, {}, {"gpu.processes": [{"gpu": 0, "pid": 9, "used_mib": 40000}]}, "confirmed"),
    (1019, {}, {"gpu.processes": [{"gpu": 0, "pid": 9, "used_mib": 40000}]}, "confirmed"),
    (1020, {"utilization": "0.9"}, {"gpu.memory": [{"total_mib": 81559, "free_mib": 40000, "free_fraction": 0.49}], "gpu.processes": []}, "confirmed"),
    (1021, {}, {"host.memory": {"total_gib": 64, "available_gib": 2, "available_fraction": 0.03}}, "confirmed"),
    (1022, {}, {"host.shm": {"total_mib": 64, "free_mib": 60, "free_bytes": 62914560}}, "confirmed"),
    (1023, {}, {"env.alloc_conf": "expandable_segments:True", "gpu.processes": []}, "confirmed"),
    (1024, {}, {"host.disk": {"path": "/ckpt", "free_gib": 0.2, "total_gib": 500, "used_fraction": 0.999}}, "confirmed"),
    (1026, {}, {"net.socket_ifname": {"set": "eth9", "matches": [], "ok": False}, "host.shm": {"total_mib": 4096}}, "confirmed"),
    (1027, {}, {"gpu.count": 1, "run.config": {}}, "confirmed"),
    (1028, {}, {"net.socket_ifname": {"set": "eth9", "matches": [], "ok": False}}, "confirmed"),
    (1029, {"port": "29500"}, {"host.port": {"port": 29500, "free": False}}, "confirmed"),
    (1032, {"required": "8"}, {"gpu.count": 4, "run.config": {}}, "confirmed"),
    (1033, {"column": "prompt"}, {"data.columns": {"question": "string", "answer": "string"}}, "confirmed"),
    (1033, {"column": "prompt"}, {"data.columns": {"prompt": "list<...>", "data_source": "string"}}, "refuted"),
    (1034, {}, {"data.prompt_format": {"column": "prompt", "present": True, "chat": False}, "data.columns": {}}, "confirmed"),
    (1035, {}, {"data.file": {"path": "/d/t.parquet", "exists": False, "parquet": None}}, "confirmed"),
    (1035, {}, {"data.file": {"path": "/d/t.parquet", "exists": True, "parquet": True}}, "refuted"),
    (1036, {"length": "5000", "limit": "4096"}, {"data.prompt_tokens": {"rows": 10, "max": 4500, "p50": 300, "p99": 4000}}, "confirmed"),
    (1041, {"path": "/m"}, {"model.files": {"path": "/m", "exists": False, "config": None, "tokenizer": None}}, "confirmed"),
    (1042, {}, {"model.type_known": {"model_type": "qwen3_5_moe", "known": False}}, "confirmed"),
    (1042, {}, {"model.type_known": {"model_type": "qwen2", "known": True}}, "refuted"),
    (1043, {}, {"model.chat_template": False}, "confirmed"),
    (1043, {}, {"model.chat_template": True}, "refuted"),
    (1044, {"data_source": "my/data"}, {"data.data_source": ["my/data"]}, "confirmed"),
    (1044, {"data_source": "my/data"}, {"data.data_source": ["openai/gsm8k"]}, "refuted"),
    (1046, {"path": "/c/actor/fsdp_config.json"}, {"ckpt.files": {"path": "/c/actor", "exists": True, "files": [], "named": "fsdp_config.json", "named_present": False}}, "confirmed"),
    (1047, {}, {"pkg.conflicts": ["x"], "gpu.processes": []}, "confirmed"),
    (1048, {}, {"pkg.conflicts": ["verl 0.5.0 requires tensordict<=0.6.2, but tensordict 0.9.1 is installed"]}, "confirmed"),
]


@pytest.mark.parametrize("errno,captures,facts,want", RULE_CASES, ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(RULE_CASES)])
def test_kb_rules(kb, errno, captures, facts, want):
    e = kb.get(errno)
    if e is None or not e.checks:
        pytest.skip(f"{errno} has no rules in this checkout")
    names = {*e.probes, *(c.probe for c in e.checks), *(c.against for c in e.checks if c.against)}
    all_facts = {n: Fact(n, known=False, reason="not probed in this test") for n in names}
    all_facts.update({n: F(n, v) for n, v in facts.items()})
    v = decide(e, captures, all_facts)
    assert v.verdict == want, v.reasons


def test_every_catalog_code_with_probes_has_a_rule_case():
    if not CATALOG.is_file():
        pytest.skip(f"{CATALOG} is not in this checkout")
    codes = {c["errno"] for c in yaml.safe_load(CATALOG.read_text())["codes"] if c.get("probes")}
    assert codes <= {c[0] for c in RULE_CASES}


@pytest.mark.parametrize("code, torch_read", [("1046", False), ("1012", True)])
def test_the_gpu_is_probed_only_for_a_diagnosis_that_reads_it(code, torch_read):
    # a checkpoint error's probes read files: --probe answers without importing torch (seconds, ~180 MB);
    # Triton's shared-memory error reads the GPU, so this machine's GPU is probed (torch first)
    pytest.importorskip("torch")
    log = sorted((ROOT / "fixtures" / code).glob("*.log"))[0]
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "errmap", "scan", "--probe", "--format", "json",
                           str(log)], capture_output=True, cwd=ROOT, timeout=300)
    assert json.loads(proc.stdout)["diagnoses"][0]["errno"] == int(code)
    imported = {row.rsplit("|", 1)[-1].strip() for row in proc.stderr.decode().splitlines() if "|" in row}
    assert ("torch" in imported) is torch_read
