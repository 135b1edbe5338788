"""Probes against the real machine and real files: facts, or unknown with a reason, never a crash."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from errmap.probes import PROBES, backends
from errmap.probes.base import Context, Fact, probe
from errmap.probes.running import registry, run
from errmap.probes.host import ifname_matches

from conftest import ROOT
from probe_files import model_dir, preference_parquet, raw_gsm8k_parquet, verl_parquet


def test_every_named_probe_has_a_function():
    assert set(registry()) == set(PROBES)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_answers_fact_or_unknown_with_reason(name):
    fact = run(name, Context())
    assert isinstance(fact, Fact)
    if not fact.known:
        assert fact.reason and "probe failed" not in fact.reason, fact.reason
    json.dumps(fact.to_json(), default=str)


def test_timeout_gives_unknown_and_returns_promptly():
    @probe("test.slow", timeout=0.2)
    def slow(ctx):
        time.sleep(5)

    t0 = time.monotonic()
    fact = run("test.slow")
    assert time.monotonic() - t0 < 2
    assert not fact.known and "timed out" in fact.reason
    registry().pop("test.slow")


def test_a_probe_that_raises_is_unknown():
    @probe("test.boom")
    def boom(ctx):
        raise RuntimeError("kaput")

    fact = run("test.boom")
    assert not fact.known and "kaput" in fact.reason
    registry().pop("test.boom")


# ---------------------------------------------------------------- data files


def test_verl_parquet_columns_prompt_and_sources(tmp_path):
    path = verl_parquet(tmp_path / "train.parquet", ("openai/gsm8k", "lighteval/MATH"))
    ctx = Context(data=str(path))
    assert run("data.file", ctx).value["parquet"] is True
    cols = run("data.columns", ctx).value
    assert list(cols) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert cols["prompt"].startswith("list<")
    fmt = run("data.prompt_format", ctx).value
    assert fmt["present"] and fmt["chat"] is True
    assert sorted(run("data.data_source", ctx).value) == ["lighteval/MATH", "openai/gsm8k"]


def test_plain_string_prompt_is_not_chat(tmp_path):
    ctx = Context(data=str(preference_parquet(tmp_path / "pref.parquet")))
    fmt = run("data.prompt_format", ctx).value
    assert fmt == {"column": "prompt", "present": True, "type": "string", "chat": False}
    assert not run("data.data_source", ctx).known


def test_prompt_key_follows_the_run_settings(tmp_path):
    ctx = Context(data=str(raw_gsm8k_parquet(tmp_path / "raw.parquet")), config={"data.prompt_key": "question"})
    fmt = run("data.prompt_format", ctx).value
    assert fmt["column"] == "question" and fmt["present"] and not fmt["chat"]


def test_missing_directory_text_and_lfs_pointer(tmp_path):
    missing = Context(data=str(tmp_path / "nope.parquet"))
    assert run("data.file", missing).value["exists"] is False
    assert "file not found" in run("data.columns", missing).reason
    assert run("data.file", Context(data=str(tmp_path))).value["is_dir"] is True
    text = tmp_path / "train.parquet"
    text.write_text("question,answer\n1,2\n")
    f = run("data.file", Context(data=str(text))).value
    assert f["exists"] and not f["parquet"] and not f["lfs_pointer"]
    assert "not a readable parquet" in run("data.columns", Context(data=str(text))).reason
    text.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 10\n")
    assert run("data.file", Context(data=str(text))).value["lfs_pointer"] is True


def test_no_data_file_named():
    assert "no data file" in run("data.columns", Context()).reason


# ---------------------------------------------------------------- model folders


def test_model_folder_facts(tmp_path):
    good = model_dir(tmp_path / "m")
    ctx = Context(model=str(good))
    files = run("model.files", ctx).value
    assert files["exists"] and files["config"] and files["tokenizer"]
    assert run("model.chat_template", ctx).value is True
    assert run("model.vocab", ctx).value == {"model_vocab": 16, "tokenizer_vocab": 8, "fits": True}


def test_model_folder_problems(tmp_path):
    base = model_dir(tmp_path / "base", chat_template=False)
    assert run("model.chat_template", Context(model=str(base))).value is False
    big = model_dir(tmp_path / "big", vocab=40, model_vocab=32)
    assert run("model.vocab", Context(model=str(big))).value["fits"] is False
    noconf = model_dir(tmp_path / "noconf", config=False)
    assert run("model.files", Context(model=str(noconf))).value["config"] is False
    hub = run("model.files", Context(model="Qwen/Qwen2.5-0.5B-Instruct"))
    assert hub.value["exists"] is False


def test_chat_template_file_counts(tmp_path):
    m = model_dir(tmp_path / "m", chat_template=False)
    (m / "chat_template.jinja").write_text("{{ messages }}")
    assert run("model.chat_template", Context(model=str(m))).value is True


# ---------------------------------------------------------------- host


def test_port_in_use_and_free():
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        assert run("host.port", Context(captures={"port": str(port)})).value == {"port": port, "free": False}
    finally:
        s.close()
    assert run("host.port", Context(captures={"port": str(port)})).value["free"] is True


def test_disk_of_a_named_path_that_does_not_exist_yet(tmp_path):
    v = run("host.disk", Context(captures={"path": str(tmp_path / "ckpt" / "global_step_1")})).value
    assert v["path"] == str(tmp_path) and v["free_gib"] >= 0


def test_memory_and_shm():
    mem = run("host.memory", Context())
    assert mem.known and mem.value["total_gib"] > 0
    shm = run("host.shm", Context())
    assert (shm.known and shm.value["total_mib"] >= 0) or "/dev/shm" in shm.reason


def test_nccl_variables(monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    assert run("env.nccl", Context()).value["NCCL_DEBUG"] == "INFO"


def test_socket_ifname_rules():
    names = ["lo", "eth0", "eth1", "ib0", "docker0"]
    assert ifname_matches("eth", names) == ["eth0", "eth1"]
    assert ifname_matches("=eth0", names) == ["eth0"]
    assert ifname_matches("^docker,lo", names) == ["eth0", "eth1", "ib0"]
    assert ifname_matches("bond0", names) == []


def test_socket_ifname_that_matches_nothing(monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "no-such-if")
    v = run("net.socket_ifname", Context()).value
    assert v["ok"] is False and v["matches"] == []


# ---------------------------------------------------------------- versions and GPUs


def test_module_importable():
    assert run("module.importable", Context(captures={"module": "json.decoder"})).value["importable"] is True
    v = run("module.importable", Context(captures={"module": "no_such_module_xyz.sub"})).value
    assert v["importable"] is False and "no_such_module_xyz" in v["error"]
    assert not run("module.importable", Context(captures={"module": "os; rm -rf"})).known


def test_package_versions_from_metadata():
    v = run("pkg.versions", Context()).value
    assert set(v) >= {"torch", "flash-attn", "triton", "vllm", "sglang", "transformers", "ray", "verl", "tensordict"}


def test_cuda_visible_devices_mapping(monkeypatch):
    uuids = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert backends.visible_indices(uuids) is None
    for value, want in [("", []), ("2,0", [2, 0]), ("1,7,0", [1]), ("GPU-bbbb", [1]), ("cccc,0", [2, 0]), ("-1", [])]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        assert backends.visible_indices(uuids) == want, value


def test_arch_coverage():
    from errmap.probes.versions import _covers

    cu12 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert _covers(cu12, 8.9) and _covers(cu12, 9.0) and _covers(cu12, 6.1)
    assert not _covers(["sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], 6.1)  # a P40 on a wheel without sm_6x
    assert not _covers(cu12, 12.0)
    assert _covers(["sm_80", "compute_90"], 12.0)
    assert not _covers(["sm_90a"], 10.0) and _covers(["sm_90a"], 9.0)


def test_torch_facts_match_torch():
    torch = pytest.importorskip("torch")
    assert run("torch.version", Context()).value == torch.__version__
    assert run("torch.cuda_version", Context()).value == torch.version.cuda
    assert run("torch.cuda_build", Context()).value == bool(torch.version.cuda)
    assert run("torch.cxx11_abi", Context()).value == torch.compiled_with_cxx11_abi()
    arch = run("torch.arch_list", Context())
    assert arch.value == (torch.cuda.get_arch_list() if torch.version.cuda else [])


def test_gpu_facts_agree_with_torch():
    torch = pytest.importorskip("torch")
    count = run("gpu.count", Context())
    if not torch.cuda.is_available():
        caps = run("gpu.capability", Context())
        assert count.value == 0 or not count.known or count.value >= 0
        if not caps.known:
            assert caps.reason
        return
    assert count.value == torch.cuda.device_count()
    caps = run("gpu.capability", Context()).value
    assert caps == [float("%d.%d" % torch.cuda.get_device_capability(i)) for i in range(count.value)]
    assert run("gpu.bf16", Context()).value == [c >= 8.0 for c in caps]


# ---------------------------------------------------------------- without torch, pyarrow or a GPU

_BLOCKED = """
import json, sys
for name in ("torch", "pyarrow", "pyarrow.parquet", "pynvml"):
    sys.modules[name] = None
from errmap.probes import PROBES
from errmap.probes.base import Context
from errmap.probes.running import run
ctx = Context(data=sys.argv[1], model=sys.argv[2], captures={"port": "1", "module": "json"})
print(json.dumps({n: run(n, ctx).to_json() for n in PROBES}, default=str))
"""


def test_without_torch_pyarrow_or_gpu_every_probe_answers(tmp_path):
    path = verl_parquet(tmp_path / "t.parquet")
    m = model_dir(tmp_path / "m")
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _BLOCKED, str(path), str(m)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    for name in ("gpu.names", "gpu.capability", "gpu.bf16", "gpu.shared_memory", "gpu.memory"):
        # no GPU here, or (on a GPU machine) every GPU hidden by CUDA_VISIBLE_DEVICES="": nothing to report
        assert "unknown" in facts[name] or facts[name]["value"] == [], (name, facts[name])
    assert facts["gpu.count"].get("value", 0) == 0
    for name in ("torch.version", "torch.arch_list", "torch.cxx11_abi"):
        assert "unknown" in facts[name], (name, facts[name])
    assert facts["torch.version"]["unknown"] == "torch not installed"
    assert facts["data.columns"]["unknown"] == "pyarrow not installed"
    for name, fact in facts.items():
        assert "value" in fact or fact["unknown"], name
        assert "probe failed" not in str(fact.get("unknown")), (name, fact)


def test_plain_scan_loads_no_probe_dependency(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("data.train_files=/x.parquet\ntriton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 65536.\n")
    code = ("import sys, runpy; sys.argv=['errmap','scan',sys.argv[1]]\n"
            "try:\n  runpy.run_module('errmap', run_name='__main__')\nexcept SystemExit: pass\n"
            "print('LOADED', [m for m in ('torch','pyarrow','pynvml','errmap.probes.gpu') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "LOADED []" in proc.stdout, proc.stdout + proc.stderr


def _word_tokenizer(folder):
    """A real tokenizer.json made with the tokenizers library: one token per whitespace-separated word."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    words = ["What", "is", "+", "?", "<unk>"] + [str(i) for i in range(20)]
    tok = tokenizers.Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))


def test_prompt_tokens_with_the_models_tokenizer(tmp_path):
    m = model_dir(tmp_path / "m")
    _word_tokenizer(m)
    data = verl_parquet(tmp_path / "t.parquet")  # "What is i + i?" -> What is i + i ? = 6 tokens
    v = run("data.prompt_tokens", Context(data=str(data), model=str(m))).value
    assert v == {"rows": 2, "max": 6, "p50": 6, "p99": 6}


def test_model_type_known_to_transformers(tmp_path):
    pytest.importorskip("transformers")
    m = model_dir(tmp_path / "m")
    assert run("model.type_known", Context(model=str(m))).value["known"] is True
    (m / "config.json").write_text(json.dumps({"model_type": "no_such_arch_xyz", "vocab_size": 16}))
    assert run("model.type_known", Context(model=str(m))).value["known"] is False


def test_model_type_without_transformers_is_unknown(tmp_path):
    import importlib.util

    if importlib.util.find_spec("transformers") is not None:
        pytest.skip("transformers is installed here")
    m = model_dir(tmp_path / "m")
    assert run("model.type_known", Context(model=str(m))).reason == "transformers not installed"


def test_module_of_a_compiled_extension():
    from errmap.probes.base import Unknown
    from errmap.probes.versions import module_of_library

    assert module_of_library("/venv/lib/python3.10/site-packages/vllm/_C.abi3.so") == "vllm._C"
    assert module_of_library("/x/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so") == "flash_attn_2_cuda"
    with pytest.raises(Unknown):
        module_of_library("libcudart.so.12")
    v = run("module.importable", Context(captures={"library": "/x/site-packages/no_such_ext_xyz.cpython-311-x86_64-linux-gnu.so"})).value
    assert v["module"] == "no_such_ext_xyz" and v["importable"] is False


def test_model_type_named_in_the_log():
    pytest.importorskip("transformers")
    assert run("model.type_known", Context(captures={"model_type": "llama"})).value["known"] is True


def test_checkpoint_folder_and_the_file_the_log_names(tmp_path):
    actor = tmp_path / "global_step_10" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_2_rank_0.pt").write_bytes(b"x")
    v = run("ckpt.files", Context(captures={"path": str(actor / "fsdp_config.json")})).value
    assert v["exists"] and v["named"] == "fsdp_config.json" and v["named_present"] is False
    assert v["files"] == 1 and v["world_sizes"] == [2]
    v = run("ckpt.files", Context(captures={"path": str(actor / "model_world_size_2_rank_0.pt")})).value
    assert v["named_present"] is True
    assert run("ckpt.files", Context(captures={"path": str(tmp_path / "nope" / "x.pt")})).value["exists"] is False


def test_the_data_file_the_error_names_wins(tmp_path):
    good = verl_parquet(tmp_path / "train.parquet")
    missing = tmp_path / "val.parquet"
    v = run("data.file", Context(data=str(good), captures={"path": str(missing)})).value
    assert v["path"] == str(missing) and v["exists"] is False and v["parquet"] is None


def test_a_hung_backend_is_given_up_on_once():
    calls = []

    def hang():
        calls.append(1)
        time.sleep(5)

    from errmap.probes.base import Unknown

    t0 = time.monotonic()
    for _ in range(3):
        with pytest.raises(Unknown, match="did not answer"):
            backends._once("test-hang", hang, timeout=0.2)
    assert time.monotonic() - t0 < 1.5 and calls == [1]


def test_a_fact_is_shortened_between_words_never_inside_a_path():
    from errmap.probes.base import short

    path = "/data/" + "x" * 200 + "/train.parquet"
    assert short({"path": path, "exists": True}) == f"path={path} …"  # the path whole, the rest left off
    names = ", ".join(f"package{i}" for i in range(40))
    cut = short(names, 80)
    assert cut.endswith(" …") and names.startswith(cut[:-2]) and names[len(cut) - 2] == ","
