"""`errmap doctor`: read this machine (and the run's data, model and settings) before a run starts,
print an environment block to paste into an issue, and warn about the codes this setup will hit.

Each warning names the code it predicts and the facts behind it. Settings come from the overrides
given after `--` (verl/Hydra style, `key=value`); a setting left out takes verl's default from
verl/trainer/config/ppo_trainer.yaml, and the warning says so.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

from errmap.probes import PROBES, registry
from errmap.probes.base import Context, Fact, run, short
from errmap.probes.config import all_files, parse_overrides

# verl defaults (verl/trainer/config/ppo_trainer.yaml) used when the overrides leave a key out
VERL_DEFAULTS = {
    "data.prompt_key": "prompt",
    "data.reward_fn_key": "data_source",
    "data.max_prompt_length": "512",
    "data.max_response_length": "512",
    "actor_rollout_ref.rollout.max_num_batched_tokens": "8192",
    "actor_rollout_ref.rollout.enable_chunked_prefill": "true",
    "actor_rollout_ref.rollout.dtype": "bfloat16",
    "trainer.n_gpus_per_node": "8",
    "trainer.nnodes": "1",
    "data.train_batch_size": "1024",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "256",  # verl/trainer/config/actor/actor.yaml
    "actor_rollout_ref.actor.strategy": "fsdp",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "1",
    "actor_rollout_ref.rollout.n": "1",
}
ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
MACHINE_ORDER = [
    "gpu.count", "gpu.names", "gpu.capability", "gpu.bf16", "gpu.memory", "gpu.shared_memory", "gpu.processes",
    "env.cuda_visible_devices", "driver.version", "driver.cuda_version", "torch.version", "torch.cuda_version",
    "torch.cuda_build", "torch.arch_list", "torch.gpu_supported", "torch.cxx11_abi", "nvcc.version", "nccl.version",
    "pkg.versions", "pkg.conflicts", "host.memory", "host.shm", "host.disk", "env.nccl", "env.alloc_conf",
    "net.interfaces", "net.socket_ifname",
]
DATA_PROBES = ["data.file", "data.columns", "data.prompt_format", "data.data_source"]
MODEL_PROBES = ["model.files", "model.chat_template", "model.vocab", "model.type_known"]


@dataclass
class Warning_:
    errno: int
    says: str
    facts: dict[str, Any] = field(default_factory=dict)
    about: str | None = None  # the file a warning is about


@dataclass
class Doctor:
    config: dict[str, str]
    data: list[str]
    model: str | None
    facts: dict[str, Fact] = field(default_factory=dict)
    data_facts: dict[str, dict[str, Fact]] = field(default_factory=dict)
    model_facts: dict[str, Fact] = field(default_factory=dict)
    flash_attn: Fact | None = None
    warnings: list[Warning_] = field(default_factory=list)
    typed: list[str] = field(default_factory=list)  # keys of overrides without `+` (which adds a key on purpose)

    # ------------------------------------------------------------ reading

    def setting(self, key: str) -> tuple[str | None, bool]:
        """(value, given): a setting from the overrides, else verl's default (given=False)."""
        for k in (key, "+" + key, "++" + key):
            if k in self.config:
                return self.config[k], True
        return VERL_DEFAULTS.get(key), False

    def run_probes(self) -> None:
        ctx = Context(config=self.config, model=self.model)
        for name in MACHINE_ORDER:
            self.facts[name] = run(name, ctx)
        if os.environ.get("MASTER_PORT"):
            self.facts["host.port"] = run("host.port", ctx)
        self.facts["run.config"] = run("run.config", ctx)
        for path in self.data:
            dctx = Context(data=path, model=self.model, config=self.config)
            names = DATA_PROBES + (["data.prompt_tokens"] if self.model else [])
            self.data_facts[path] = {n: run(n, dctx) for n in names}
        if self.model:
            mctx = Context(model=self.model, config=self.config)
            self.model_facts = {n: run(n, mctx) for n in MODEL_PROBES}
        attn, _ = self.setting(ATTN_KEY)
        if attn in (None, "flash_attention_2"):
            self.flash_attn = run("module.importable", Context(captures={"module": "flash_attn"}))

    # ------------------------------------------------------------ predicting

    def value(self, name: str) -> Any:
        f = self.facts.get(name)
        return f.value if f is not None and f.known else None

    def warn(self, errno: int, says: str, *names: str, about: str | None = None, facts: dict[str, Fact] | None = None) -> None:
        pool = facts or self.facts
        self.warnings.append(Warning_(errno, says, {n: pool[n].to_json() for n in names if n in pool}, about))

    def predict(self) -> None:
        self._gpu_warnings()
        self._data_warnings()
        self._batch_warnings()
        self._key_warnings()
        self._model_warnings()
        self._config_warnings()

    def _gpu_warnings(self) -> None:
        caps = self.value("gpu.capability") or []
        old = [c for c in caps if c < 8.0]
        dtype, dtype_given = self.setting("actor_rollout_ref.rollout.dtype")
        if old and str(dtype).lower() in ("bfloat16", "bf16"):
            where = "the override" if dtype_given else "verl's default"
            self.warn(1009, f"GPU compute capability {short(old)} is below 8.0, which bf16 needs; rollout dtype is {dtype} ({where}) "
                            "and FSDP's mixed precision uses bf16 too: set actor_rollout_ref.rollout.dtype=float16 and fp16 mixed precision",
                      "gpu.capability", "gpu.bf16")
        attn, attn_given = self.setting(ATTN_KEY)
        if old and attn in (None, "flash_attention_2"):
            how = f"{ATTN_KEY}={attn}" if attn_given else "verl's default attn_implementation (flash_attention_2)"
            self.warn(1010, f"GPU compute capability {short(old)} is below 8.0 and FlashAttention-2 needs Ampere: {how}; "
                            f"use +{ATTN_KEY}=eager (or sdpa)", "gpu.capability")
        if self.flash_attn is not None and self.flash_attn.known and not self.flash_attn.value.get("importable") and self.config:
            self.warnings.append(Warning_(1011, f"attn_implementation is flash_attention_2 but flash_attn does not import here ({self.flash_attn.value.get('error')})",
                                          {"module.importable": self.flash_attn.to_json()}))
        drv, tcu = self.value("driver.cuda_version"), self.value("torch.cuda_version")
        if drv and tcu and _version(drv) < _version(tcu):
            self.warn(1003, f"the driver supports CUDA {drv} but torch was built for CUDA {tcu}", "driver.cuda_version", "torch.cuda_version", "driver.version")
        supported = self.value("torch.gpu_supported")
        if supported and not all(supported):
            self.warn(1001, "torch holds no kernel image for at least one visible GPU", "torch.gpu_supported", "torch.arch_list", "gpu.capability")
        count = self.value("gpu.count")
        cuda_build = self.value("torch.cuda_build")
        if count == 0 or cuda_build is False:
            why = "no CUDA GPU is visible" if count == 0 else "torch is a CPU-only build"
            self.warn(1004, f"{why}: a GPU training run fails at its first CUDA call", "gpu.count", "torch.cuda_build", "env.cuda_visible_devices")
        shm = self.value("host.shm")
        if shm and shm.get("total_mib", 1 << 30) < 1024:
            self.warn(1022, f"/dev/shm holds only {shm['total_mib']} MiB (Docker's default is 64 MiB): NCCL and DataLoader workers need more; "
                            "run the container with --shm-size=16g or --ipc=host", "host.shm")
        port = self.value("host.port")
        if port and port.get("free") is False:
            self.warn(1029, f"MASTER_PORT={port['port']} is already taken on this machine: pick a free port or stop the job holding it", "host.port")
        ifname = self.value("net.socket_ifname")
        if ifname and ifname.get("ok") is False:
            self.warn(1028, f"NCCL_SOCKET_IFNAME={ifname['set']} selects no interface that is up here", "net.socket_ifname", "net.interfaces")
        conflicts = self.value("pkg.conflicts")
        if conflicts:
            self.warn(1048, f"installed versions do not meet the stack's requirements: {'; '.join(conflicts[:3])}", "pkg.conflicts")
        nvcc = self.value("nvcc.version")
        if nvcc and tcu and _version(nvcc)[:1] != _version(tcu)[:1]:
            self.warn(1006, f"nvcc is CUDA {nvcc} but torch was built with CUDA {tcu}: building flash-attn, apex or other extensions from source will fail",
                      "nvcc.version", "torch.cuda_version")

    def _data_warnings(self) -> None:
        prompt_key, _ = self.setting("data.prompt_key")
        source_key, _ = self.setting("data.reward_fn_key")
        for path, facts in self.data_facts.items():
            f = facts["data.file"]
            if f.known and (not f.value.get("exists") or f.value.get("is_dir") or not f.value.get("parquet")):
                v = f.value
                why = ("does not exist" if not v.get("exists") else "is a directory" if v.get("is_dir")
                       else "is a git-lfs pointer, not the data (run git lfs pull)" if v.get("lfs_pointer") else "is not a parquet file")
                self.warn(1035, f"{path} {why}", "data.file", about=path, facts=facts)
                continue
            cols = facts["data.columns"]
            if cols.known:
                missing = [k for k in (prompt_key, source_key, "reward_model") if k not in cols.value]
                if missing:
                    self.warn(1033, f"{path} has no column {', '.join(repr(m) for m in missing)} (columns: {', '.join(cols.value)}); "
                                    "verl's RL parquet has data_source, prompt (chat messages), ability, reward_model, extra_info",
                              "data.columns", about=path, facts=facts)
            tokens = facts.get("data.prompt_tokens")
            limit, given = self.setting("data.max_prompt_length")
            if tokens is not None and tokens.known and limit and str(limit).isdigit() and tokens.value["max"] > int(limit):
                self.warn(1036, f"{path}: the longest prompt has at least {tokens.value['max']} tokens (text alone, before the chat "
                                f"template), above data.max_prompt_length={limit}{'' if given else ' (verl default)'}: raise it or "
                                "set data.filter_overlong_prompts=True", "data.prompt_tokens", about=path, facts=facts)
            fmt = facts["data.prompt_format"]
            if fmt.known and fmt.value.get("present") and not fmt.value.get("chat"):
                self.warn(1034, f"{path}: column {fmt.value['column']!r} is {fmt.value.get('type')}, not a list of "
                                "{role, content} chat messages", "data.prompt_format", about=path, facts=facts)

    def _batch_warnings(self) -> None:
        """1039 from the batch keys, by verl's own rules for FSDP actors: validate_config in
        verl/utils/config.py, ActorConfig.validate, and the per-GPU normalization of the actor worker."""
        def num(key: str) -> tuple[int | None, str]:
            value, given = self.setting(key)
            shown = f"{key.rsplit('.', 1)[-1]}={value}{'' if given else ' (verl default)'}"
            return (int(value) if value is not None and str(value).isdigit() else None), shown

        strategy, _ = self.setting("actor_rollout_ref.actor.strategy")
        if strategy not in ("fsdp", "fsdp2"):
            return  # megatron divides by its data-parallel size: not predicted
        (train, t), (mini, m), (n, r) = (num(k) for k in ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size",
                                                            "actor_rollout_ref.rollout.n"))
        (per_node, g), (nodes, h), (sp, _) = (num(k) for k in ("trainer.n_gpus_per_node", "trainer.nnodes",
                                                                "actor_rollout_ref.actor.ulysses_sequence_parallel_size"))
        micro, u = num("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
        if None in (train, mini, n, per_node, nodes, sp) or not per_node * nodes or not sp:
            return
        gpus = per_node * nodes
        if train * n % gpus:
            self.warn(1039, f"real_train_batch_size {train * n} ({t} × {r}) is not divisible by the {gpus} GPUs ({g}, {h}); "
                            "verl refuses it: make train_batch_size × rollout.n a multiple of the GPU count", "run.config")
        if train < mini:
            self.warn(1039, f"{t} is smaller than {m}; verl needs train_batch_size >= ppo_mini_batch_size", "run.config")
        per_gpu = mini * n // (gpus // sp) if gpus >= sp else 0
        if per_gpu <= 0:
            self.warn(1039, f"{m} × {r} over {gpus // sp} data-parallel ranks is {per_gpu} per GPU; verl needs at least 1: "
                            "raise ppo_mini_batch_size", "run.config")
        elif micro and per_gpu % micro:
            self.warn(1039, f"the per-GPU mini-batch ({m} × {r} / {gpus // sp} ranks = {per_gpu}) is not divisible by {u}; "
                            "verl refuses it: pick a micro-batch size that divides it", "run.config")

    def _key_warnings(self) -> None:
        """1038 for an override key verl's config does not have, when a key it has is that key misspelt."""
        import difflib

        known, free = verl_keys()
        for key in self.typed:
            parts = key.split(".")
            if key in known or any(".".join(parts[:i]) in free for i in range(1, len(parts))):
                continue
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
            if close:
                self.warn(1038, f"{key} is not a key of verl's PPO trainer config (as of verl {VERL_KEYS_VERSION}): "
                                f"did you mean {close[0]}? Hydra refuses an unknown key (prefix + adds one on purpose)",
                          "run.config")

    def _model_warnings(self) -> None:
        if not self.model_facts:
            return
        files = self.model_facts["model.files"]
        if files.known and (not files.value.get("exists") or not files.value.get("config") or not files.value.get("tokenizer")):
            v = files.value
            why = ("is not a local folder (a hub id needs network access)" if not v.get("exists")
                   else "has no config.json" if not v.get("config") else "has no tokenizer files")
            self.warn(1041, f"model {self.model} {why}", "model.files", about=self.model, facts=self.model_facts)
        tmpl = self.model_facts["model.chat_template"]
        if tmpl.known and tmpl.value is False:
            self.warn(1043, f"the tokenizer of {self.model} has no chat template; verl applies one to every prompt "
                            "(set actor_rollout_ref.model.custom_chat_template or use an instruct model)",
                      "model.chat_template", about=self.model, facts=self.model_facts)
        known = self.model_facts["model.type_known"]
        if known.known and not known.value.get("known") and not known.value.get("auto_map"):
            self.warn(1042, f"transformers {known.value.get('transformers')} does not know model_type "
                            f"{known.value.get('model_type')!r}: upgrade transformers (or vLLM/SGLang to a release that supports it)",
                      "model.type_known", about=self.model, facts=self.model_facts)
        vocab = self.model_facts["model.vocab"]
        if vocab.known and not vocab.value.get("fits"):
            self.warn(1015, f"the tokenizer has {vocab.value['tokenizer_vocab']} tokens but the model's embedding only "
                            f"{vocab.value['model_vocab']}: token ids past it trip a device-side assert", "model.vocab",
                      about=self.model, facts=self.model_facts)

    def _config_warnings(self) -> None:
        if not self.config:
            return
        batched, b_given = self.setting("actor_rollout_ref.rollout.max_num_batched_tokens")
        max_len, l_given = self.setting("actor_rollout_ref.rollout.max_model_len")
        prompt, _ = self.setting("data.max_prompt_length")
        response, _ = self.setting("data.max_response_length")
        try:
            need = int(max_len) if max_len not in (None, "null", "None") else int(prompt) + int(response)
            have = int(batched)
        except (TypeError, ValueError):
            need = have = None
        if need is not None and have < need:
            how = "rollout.max_model_len" if l_given else f"data.max_prompt_length + data.max_response_length = {prompt} + {response}"
            self.warnings.append(Warning_(1040, f"actor_rollout_ref.rollout.max_num_batched_tokens={have}{'' if b_given else ' (verl default)'} "
                                                f"is below the sequence length {need} ({how}): raise it to at least {need}",
                                          {"run.config": self.facts["run.config"].to_json()}))
        gpus, g_given = self.setting("trainer.n_gpus_per_node")
        count = self.value("gpu.count")
        try:
            asked = int(gpus)
        except (TypeError, ValueError):
            asked = None
        if asked is not None and count and asked > count:  # no GPU at all is 1004
            src = "" if g_given else " (verl's default)"
            self.warn(1032, f"trainer.n_gpus_per_node={asked}{src} but this node has {count} GPU{'s' if count != 1 else ''}: "
                            f"set trainer.n_gpus_per_node={count}", "gpu.count", "run.config")

    # ------------------------------------------------------------ output

    def to_json(self, kb=None) -> dict[str, Any]:
        return {
            "version": 1,
            "errmap": _errmap_version(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "facts": {n: f.to_json() for n, f in self.facts.items()},
            "data": {p: {n: f.to_json() for n, f in fs.items()} for p, fs in self.data_facts.items()},
            "model": {n: f.to_json() for n, f in self.model_facts.items()} if self.model else None,
            "warnings": [
                {"errno": w.errno, **_title(kb, w.errno), "says": w.says, **({"file": w.about} if w.about else {}), "facts": w.facts}
                for w in self.warnings
            ],
        }


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _errmap_version() -> str:
    try:
        import importlib.metadata as md

        return md.version("errmap")
    except Exception:
        return "unknown"


def _title(kb, errno: int) -> dict[str, str]:
    e = kb.get(errno) if kb is not None else None
    return {"slug": e.slug, "title": e.title} if e else {}


VERL_KEYS_VERSION = "0.8.0.dev"  # of errmap/probes/verl_keys.txt


def verl_keys() -> tuple[list[str], set[str]]:
    """(every key of verl's PPO trainer config, the mappings under which any key goes): a mapping
    written `{}` there, or one verl hands on as-is (override_*, *_kwargs)."""
    from pathlib import Path

    lines = [x for x in (Path(__file__).parent / "probes" / "verl_keys.txt").read_text().splitlines() if x and not x.startswith("#")]
    known = [x for x in lines if not x.endswith(".*")]
    free = {x[:-2] for x in lines if x.endswith(".*")}
    free |= {".".join(k.split(".")[: i + 1]) for k in lines for i, part in enumerate(k.split("."))
             if part.startswith("override_") or part.endswith("kwargs")}
    return known, free


def diagnose_setup(data: list[str], model: str | None, overrides: list[str]) -> Doctor:
    config = parse_overrides(overrides)
    files = list(data)
    for key in ("data.train_files", "data.val_files"):
        for k in (key, "+" + key, "++" + key):
            files += [f for f in all_files(config.get(k)) if f not in files]
    model = model or config.get("actor_rollout_ref.model.path")
    doc = Doctor(config, files, model, typed=[a.partition("=")[0] for a in overrides if "=" in a and not a.startswith("+")])
    doc.run_probes()
    doc.predict()
    return doc


def environment_block(doc: Doctor) -> str:
    """Plain text, one fact a line, to paste into an issue."""
    lines = [f"errmap {_errmap_version()} doctor · Python {sys.version.split()[0]} · {platform.platform()}"]
    width = max(len(n) for n in PROBES) + 2
    for name, fact in doc.facts.items():
        if name == "run.config" and not doc.config:
            continue
        lines.append(f"{name:<{width}}{fact.show()}" + (f"  [{fact.via}]" if fact.known and fact.via else ""))
    for path, facts in doc.data_facts.items():
        lines.append(f"-- data {path}")
        lines += [f"{n:<{width}}{f.show()}" for n, f in facts.items()]
    if doc.model:
        lines.append(f"-- model {doc.model}")
        lines += [f"{n:<{width}}{f.show()}" for n, f in doc.model_facts.items()]
    return "\n".join(lines)


def print_doctor(con, doc: Doctor, kb=None) -> None:
    """The report in the current language (the environment block stays as the probes give it:
    it is pasted into issues); `kb`, if given, in that language too, names the codes."""
    from errmap.i18n import _, ngettext
    from errmap.report import escape

    con.print(f"[bold]{_('Environment')}[/] [dim]{_('(paste this block into an issue)')}[/]")
    con.print("```", markup=False)
    con.print(environment_block(doc), markup=False, highlight=False, soft_wrap=True)
    con.print("```", markup=False)
    if not doc.warnings:
        con.print(f"[green]{_('No known failure predicted for this setup.')}[/]")
        return
    n = len(doc.warnings)
    con.print(f"\n[bold]{ngettext('{n} warning', '{n} warnings', n).format(n=n)}[/]{_(': codes this setup will hit')}")
    for w in doc.warnings:
        title = _title(kb, w.errno).get("title", "")
        con.print(f"  [bold red]{w.errno}[/] [bold]{escape(title)}[/]")
        con.print(f"     {escape(w.says)}")
    con.print(f"[dim]{_('errmap explain N shows the cause and fix of each code.')}[/]")


registry()  # probes are registered before any run
