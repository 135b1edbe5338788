"""The GPU a run ran on, and what it can do.

The log names it: a failure's own message (vLLM's "Your Tesla P40 GPU has compute capability 6.1", torch's
"... with CUDA capability sm_86 is not compatible ...", Triton's "Found Tesla P40 which is too old"), read from the
captures its KB anchor already takes; or a line that prints a device name as the driver reports it (an
nvidia-smi table row, `torch.cuda.get_device_name()`), found by the matcher like the stack (stack.py). `--probe`
reads this machine's GPU, which wins. kb/gpus.yaml says what a named model can do; a model it lacks is named
with no facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Any

import regex

TABLE = "gpus.yaml"
NOT_IN_TABLE = "not in errmap's GPU table"
# What a line shows of a GPU: a known model's name as NVML/torch print it (the words before the model
# number, or "NVIDIA "), or any name in an nvidia-smi table row, whose persistence and display columns
# always end one way or the other ("|   0  NVIDIA H200   On  |   00000000:19:00.0 Off |").
_NAMED = (b"NVIDIA ", b"Tesla ", b"GeForce ")
LITERALS = (*_NAMED, b" Off |", b" On |")
SMI_ROW_MAX = 512  # characters: a table row is about 90; its lazy name would backtrack quadratically on a long line
SMI_ROW = regex.compile(r"(?:^|(?<=\s))\|\s+\d+\s+(?P<name>\S.*?)\s+(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
# Conditions a fix step can put on the GPU (schema.Step.gpu); each may be negated with "not ".
CONDITIONS = {
    "no-bf16": lambda a: None if a.bf16 is None else not a.bf16,
    "slow-fp16": lambda a: None if a.fp16 is None else a.fp16 == "slow",
    "no-flash-attention-2": lambda a: None if a.flash_attention_2 is None else not a.flash_attention_2,
    "no-vllm-wheels": lambda a: None if a.vllm_wheels is None else not a.vllm_wheels,
}
# Conditions that name the kind of GPU a step is for: AMD, or an architecture of the table by its name in lower
# case (`pascal`, `volta`, ...). A step naming kinds is left out where the run's GPU is known to be of another kind
# (a model of the table is an NVIDIA GPU of its architecture) and kept where the GPU is not known; "not X" leaves it
# out where the GPU is known to be X.
AMD = "amd"
# How `errmap explain` names each condition: "only on GPUs ..." / "not on GPUs ...".
CONDITION_NAMES = {
    "no-bf16": "without bf16",
    "slow-fp16": "whose fp16 is slow",
    "no-flash-attention-2": "without FlashAttention-2",
    "no-vllm-wheels": "vLLM's wheels leave out",
}
# Placeholders a KB text may use for the run's GPU (filled only where known; see Entry.fill's [[ ]]).
PLACEHOLDERS = ("gpu_name", "gpu_capability", "gpu_memory", "gpu_shared_memory", "gpu_architecture")


@dataclass(frozen=True)
class Architecture:
    capability: str
    architecture: str
    bf16: bool | None = None
    fp16: str | None = None  # full, slow (a fraction of fp32) or tensor (tensor cores)
    tensor_cores: bool | None = None
    shared_memory_per_block: int | None = None  # opt-in maximum, bytes
    flash_attention_2: bool | None = None
    vllm_wheels: bool | None = None
    torch_wheels: tuple[str, ...] = ()  # CUDA builds of current PyTorch wheels with kernels for it
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Model:
    name: str
    names: tuple[str, ...]
    capability: str
    source: str
    memory_gb: int | None = None
    memory_source: str | None = None


@dataclass(frozen=True)
class Table:
    architectures: dict[str, Architecture]
    models: tuple[Model, ...]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Table:
        archs = {a["capability"]: Architecture(**{**a, "sources": tuple(a.get("sources", ())),
                                                  "torch_wheels": tuple(a.get("torch_wheels", ()))}) for a in data["architectures"]}
        return cls(archs, tuple(Model(**{**m, "names": tuple(m["names"])}) for m in data["gpus"]))

    def model(self, name: str) -> Model | None:
        """The row whose names match this whole name (a leading "NVIDIA " and b'' quotes ignored)."""
        bare = plain(name).removeprefix("NVIDIA ")
        return next((m for m in self.models if any(regex.fullmatch(p, bare) for p in m.names)), None)

    @cached_property
    def finder(self) -> regex.Pattern[str]:
        """Known names inside a line: "NVIDIA " then a model's name, or a Tesla/GeForce name on its own."""
        alts = sorted({p for m in self.models for p in m.names}, key=len, reverse=True) or ["(?!)"]
        own = [p for p in alts if p.startswith(("Tesla ", "GeForce "))] or ["(?!)"]
        return regex.compile(rf"(?<![\w-])(?P<name>NVIDIA (?:{'|'.join(alts)})|(?:{'|'.join(own)}))(?![\w-]| (?:Ti|SUPER)\b)")


def plain(name: str) -> str:
    """A name as printed, without bytes quotes (vLLM may print b'Tesla T4') and surrounding blanks."""
    name = name.strip()
    if len(name) > 3 and name[:2] in ("b'", 'b"') and name[-1] == name[1]:
        name = name[2:-1]
    return name.strip()


def table_path() -> Path:
    from errmap.kb.files import official_dir

    return official_dir() / TABLE


@cache
def table() -> Table:
    """kb/gpus.yaml as `errmap kb check` validated it (errmap.kb.schema.GpuTable); empty when it cannot be read."""
    import yaml

    from errmap.kb.files import Loader  # libyaml where the wheel has it: the table is read at the first GPU a scan meets

    try:
        return Table.from_dict(yaml.load(table_path().read_text(encoding="utf-8"), Loader=Loader))
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        return Table({}, ())


def named_in(raw: bytes) -> str | None:
    """The GPU a line names (its bytes, prefixes and all): a known model, or the name in an nvidia-smi
    table row. A short line's answer is kept: one that names none may come from every rank at every start."""
    return _named_in(raw) if len(raw) <= 2048 else _named_in.__wrapped__(raw)  # at most 1024 lines of 2 KB kept


@lru_cache(maxsize=1024)
def _named_in(raw: bytes) -> str | None:
    """named_in, uncached. Cheap byte tests first: most lines that reach here name none."""
    if any(lit in raw for lit in _NAMED) and (m := table().finder.search(raw.decode("utf-8", "replace"))) is not None:
        return m["name"]
    if len(raw) <= SMI_ROW_MAX and (b" Off |" in raw or b" On |" in raw):
        if (m := SMI_ROW.search(raw.decode("utf-8", "replace"))) is not None:
            return m["name"]
    return None


def _capability(captures: dict[str, str]) -> str | None:
    if cap := captures.get("capability"):
        return cap
    sm = captures.get("sm")
    return f"{sm[:-1]}.{sm[-1]}" if sm and sm.isdigit() and len(sm) >= 2 else None


@dataclass
class GPU:
    """The one GPU of a run: its name, where it was read, and the table's facts when it has the model."""

    name: str
    source: str  # log | probe
    capability: str | None = None
    line: tuple[str, int] | None = None  # the file and line that named it
    memory_seen: str | None = None  # the total the allocator reported ("23.69 GiB")
    model: Model | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.name = plain(self.name)
        self.model = table().model(self.name)
        if self.model is not None:
            self.capability = self.model.capability

    @property
    def arch(self) -> Architecture | None:
        return table().architectures.get(self.model.capability) if self.model else None

    @property
    def kind(self) -> str | None:
        """Its architecture in lower case (a kind of GPU a step may name); None where the table lacks the model."""
        return self.arch.architecture.lower() if self.arch else None

    def holds(self, condition: str) -> bool | None:
        """A step condition of kb: True, False, or None when the table does not say."""
        arch = self.arch
        test = CONDITIONS.get(condition)
        return None if arch is None or test is None else test(arch)

    def values(self) -> dict[str, str]:
        """The placeholders KB texts may use, for what is known."""
        out = {"gpu_name": self.name}
        if self.capability:
            out["gpu_capability"] = self.capability
        if self.model and self.model.memory_gb:
            out["gpu_memory"] = f"{self.model.memory_gb} GB"
        if (arch := self.arch) is not None:
            out["gpu_architecture"] = arch.architecture
            if arch.shared_memory_per_block:
                out["gpu_shared_memory"] = str(arch.shared_memory_per_block)
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "capability": self.capability, "source": self.source}
        if self.line:
            out["file"], out["line"] = self.line
        if self.memory_seen:
            out["memory_seen"] = self.memory_seen
        if self.model is None:
            out["note"] = NOT_IN_TABLE
            return out
        out["model"] = self.model.name
        if self.model.memory_gb:
            out["memory_gb"] = self.model.memory_gb
        if (arch := self.arch) is not None:
            out.update({k: v for k, v in (("architecture", arch.architecture), ("bf16", arch.bf16), ("fp16", arch.fp16),
                                          ("tensor_cores", arch.tensor_cores),
                                          ("shared_memory_per_block", arch.shared_memory_per_block),
                                          ("flash_attention_2", arch.flash_attention_2),
                                          ("vllm_wheels", arch.vllm_wheels),
                                          ("torch_wheels", list(arch.torch_wheels) or None)) if v is not None})
        out["sources"] = list(dict.fromkeys([self.model.source, *([self.model.memory_source] if self.model.memory_source else []),
                                             *(arch.sources if arch else ())]))
        return out

    def describe(self) -> str:
        """'Tesla P40, compute capability 6.1, 24 GB' or 'Quadro X (not in errmap's GPU table)' for a header."""
        from errmap.report.i18n import _

        parts = [self.name]
        if self.capability:
            parts.append(_("compute capability {capability}").format(capability=self.capability))
        if self.model is None:
            return _(", ").join(parts) + f" ({_(NOT_IN_TABLE)})"
        if self.model.memory_gb:
            parts.append(f"{self.model.memory_gb} GB")
        return _(", ").join(parts) + (" (--probe)" if self.source == "probe" else "")


@cache
def kinds() -> tuple[str, ...]:
    """The kinds of GPU a step may name (see AMD above): amd and the table's architectures."""
    return (AMD, *dict.fromkeys(a.architecture.lower() for a in table().architectures.values()))


def shown(conditions: tuple[str, ...], gpu: GPU | None) -> bool:
    """Whether a fix step with these GPU conditions is for this run: a fact "X" only where the table says X of
    the run's GPU, "not X" unless it says X; kinds of GPU as said at AMD above."""
    kind = gpu.kind if gpu is not None else None
    named = [c for c in conditions if c in kinds()]
    if named and kind is not None and kind not in named:
        return False
    for c in conditions:
        negated, base = c.startswith("not "), c.removeprefix("not ")
        if base in kinds():
            if negated and kind == base:
                return False
            continue
        held = gpu.holds(base) if gpu is not None else None
        if held is not True if not negated else held is True:
            return False
    return True


# Where a Chinese phrase meets a Latin word it was put beside ("不支持 bf16" + "的 GPU"): a space, as Chinese
# text around code and names has.
HAN_LATIN = regex.compile(r"(?<=\p{Han})(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])(?=\p{Han})")


def label(conditions: tuple[str, ...]) -> str:
    """'only on GPUs whose fp16 is slow; not on GPUs without bf16' for a step's conditions ('' for none)."""
    from errmap.report.i18n import _

    def kind(names: list[str]) -> str:
        archs = [n.capitalize() for n in names if n != AMD]
        return _("made by AMD") if not archs else _("of the {architectures} architecture").format(architectures=_(" or ").join(archs))

    named = [c for c in conditions if c in kinds()]
    out = [_("for GPUs {what}").format(what=kind(named))] if named else []
    for c in conditions:
        base = c.removeprefix("not ")
        if c in named:
            continue
        what = kind([base]) if base in kinds() else _(CONDITION_NAMES.get(base, base))
        out.append((_("not on GPUs {what}") if c.startswith("not ") else _("only on GPUs {what}")).format(what=what))
    return HAN_LATIN.sub(" ", _("; ").join(out))


def fitting(items: list, gpu: GPU | None) -> list:
    """Fix steps for the run's GPU (anything with a `gpu` tuple of conditions)."""
    return [x for x in items if shown(getattr(x, "gpu", ()), gpu)]


def from_log(incidents: list, named: list[tuple[str, int, str]]) -> GPU | None:
    """The run's GPU from its incidents (their captures, earliest first) and the lines that named one
    (file, line, name), in the order the run's files were read; the total memory from an OOM message."""
    gpu = None
    for inc in incidents:
        name = inc.captures.get("gpu")
        if name and not name.isdigit():
            gpu = GPU(name, "log", _capability(inc.captures), (inc.first.path, inc.first.lineno))
            break
    if gpu is None and named:
        path, lineno, name = named[0]
        gpu = GPU(name, "log", line=(path, lineno))
    # the card's total memory, where an OOM message named it (the `capacity` capture of its anchors)
    seen = next((inc.captures["capacity"] for inc in incidents if inc.captures.get("capacity")), None)
    if gpu is not None and seen:
        gpu.memory_seen = seen if not seen.isdigit() else f"{int(seen) / (1 << 30):.2f} GiB"
    return gpu


def from_json(d: dict[str, Any] | None) -> GPU | None:
    """The GPU of a diagnosis's JSON `gpu` field, as the report made it."""
    if not d or not d.get("name"):
        return None
    gpu = GPU(d["name"], d.get("source", "log"), d.get("capability"))
    gpu.memory_seen = d.get("memory_seen")
    return gpu


def from_probe(names: Any, capabilities: Any) -> GPU | None:
    """This machine's first GPU from the gpu.names and gpu.capability facts (errmap.probes.gpu), when known."""
    if not (getattr(names, "known", False) and isinstance(names.value, list) and names.value):
        return None
    gpu = GPU(str(names.value[0]), "probe")
    if gpu.model is None and getattr(capabilities, "known", False) and isinstance(capabilities.value, list) and capabilities.value:
        gpu.capability = f"{float(capabilities.value[0]):.1f}"
    return gpu
