"""The schema of a KB entry: pydantic models that validate each YAML file.

Used only when an entry is read from YAML (a cold cache, `errmap kb check`, the docs build); a run
with a warm cache never imports pydantic. `errmap.kb.model` holds the plain runtime types.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

import regex
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from errmap.kb.stacks import ORDER

PLACEHOLDER = regex.compile(r"\{(\w+)\}")


# A group whose alternatives are plain text: "(?P<v>nan|inf|-inf)", "(?:actor|critic)".
_PLAIN_GROUP = regex.compile(r"\((?:\?:|\?P<\w+>)?([^()\\|?*+\[\]{}]*(?:\|[^()\\|?*+\[\]{}]*)+)\)(?![?*+{])")


def _texts(pattern: str, limit: int = 256) -> list[str]:
    """The regex source as plain texts, to check that literals occur in it: groups of plain
    alternatives expanded, escapes of punctuation and named-group openers removed (so
    `memory: (?P<n>-\\d+)` holds `memory: -` and `grad_norm:(?P<v>nan|inf)` holds `grad_norm:inf`)."""
    out = [pattern]
    while len(out) < limit and any(_PLAIN_GROUP.search(t) for t in out):
        expanded = []
        for t in out:
            m = _PLAIN_GROUP.search(t)
            expanded += [t[: m.start()] + alt + t[m.end():] for alt in m[1].split("|")] if m else [t]
        out = expanded
    return [regex.sub(r"\(\?P<\w+>", "", regex.sub(r"\\([^\w\s])", r"\1", t)) for t in out]


class Site(BaseModel):
    """A place in a project's source that prints an anchor's message, as seen at one release."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="the GitHub repository, owner/name")
    path: str = Field(min_length=3, description="the file that prints it")
    version: str = Field(min_length=1, description="a release tag (or commit) where it was seen")


class Anchor(BaseModel):
    """One real message: a required literal for the prefilter and the full pattern."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    literal: str | list[str] = Field(description="substring(s) of the raw line; one must occur")
    regex: str = Field(description="pattern searched in the line; a leading ^ means where a message starts")
    source: str = Field(min_length=3, description="where the message comes from: upstream file or issue URL")
    unless: str | None = Field(default=None, description="a look-alike: no match on a line this pattern finds")
    frame: str | None = Field(default=None, description="a frame ('path:function  source line') of the failure's traceback must match")
    sites: list[Site] = Field(default_factory=list, description="where the software prints it: repository, path, version")

    @property
    def literals(self) -> list[str]:
        return [self.literal] if isinstance(self.literal, str) else list(self.literal)

    @field_validator("regex", "unless", "frame")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            regex.compile(value)
        except regex.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from None
        return value

    @model_validator(mode="after")
    def _literals_in_pattern(self) -> Anchor:
        texts = _texts(self.regex)
        for lit in self.literals:
            if len(lit) < 4:
                raise ValueError(f"literal {lit!r} is too short to prefilter (4 characters at least)")
            if not any(lit in t for t in texts):
                raise ValueError(f"literal {lit!r} does not occur in the regex as written")
        return self

    @cached_property
    def compiled(self) -> regex.Pattern[str]:
        return regex.compile(self.regex)

    @property
    def groups(self) -> set[str]:
        return set(self.compiled.groupindex)


def _known_stack(value: str) -> str:
    if value not in ORDER:
        expected = ", ".join(map(repr, ORDER[:-1])) + f" or {ORDER[-1]!r}"
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
    return value


# The software stacks a fix step or link can be for: the keys of kb/stacks.yaml; none means general.
Stack = Annotated[str, AfterValidator(_known_stack)]


def _gpu_condition(value: str) -> str:
    from errmap.kb.gpus import CONDITIONS, kinds

    if value.removeprefix("not ") not in (*CONDITIONS, *kinds()):
        raise ValueError(f"unknown GPU condition {value!r}: one of {', '.join((*CONDITIONS, *kinds()))}, or 'not ' and one")
    return value


# What a fix step can ask of the run's GPU, as kb/gpus.yaml tells it: a fact (errmap.kb.gpus.CONDITIONS) or the kind of
# GPU it is for (errmap.kb.gpus.kinds: amd, or an architecture's name in lower case); "not X" negates.
GpuCondition = Annotated[str, AfterValidator(_gpu_condition)]


# A step's code span that names a setting of a versioned stack: a dotted config key ("data.train_files",
# "actor_rollout_ref.rollout.name=hf"), a command-line flag ("--vllm_num_engines"). Environment variables (UPPER case)
# and shell commands are not settings of a stack.
_KEY = regex.compile(r"`(?:\+{1,2})?((?:[a-z_][\w-]*\.)+[a-z_][\w-]*(?:=[^`\s]*)?|--[a-z][\w-]*(?:[= ][^`\s]*)?)`")


def versioned_key(text: str) -> str | None:
    """The first setting a step names that only some releases of its stack have."""
    m = _KEY.search(text)
    return m[1] if m else None


class Step(BaseModel):
    """One fix step: its text, the stack(s) it is for (without `stack` it is general) and the GPU it is
    for (`gpu`: "X" shows it only where the run's GPU is known to be X, "not X" hides it there)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = Field(min_length=3)
    stack: list[Stack] = Field(default_factory=list, description="the stack(s) this step is for; none: any run")
    gpu: list[GpuCondition] = Field(default_factory=list, description="conditions on the run's GPU; none: any GPU")
    versions: dict[str, str] = Field(
        default_factory=dict,
        description="the releases it holds for, per package (errmap.versions.KNOWN): a specifier such as '<0.6' or "
                    "'>=0.3,<0.6', empty for every release checked")
    seen: str | None = Field(default=None, description="where its keys were checked: tag and file of each package")

    @field_validator("versions")
    @classmethod
    def _specifiers(cls, value: dict[str, str]) -> dict[str, str]:
        from errmap.kb import versions

        for package, spec in value.items():
            if package not in versions.KNOWN:
                raise ValueError(f"versions: unknown package {package!r} (one of {', '.join(versions.KNOWN)})")
            if not versions.valid(spec):
                raise ValueError(f"versions: {package}: {spec!r} is no specifier (clauses like '>=0.3' or '<0.6', "
                                 "joined by commas)")
        return value

    @model_validator(mode="after")
    def _seen(self) -> Step:
        if self.versions and not self.seen:
            raise ValueError("a step with versions says where they were seen (seen: tag and file)")
        if set(self.stack) - {"pytorch"} and not self.versions and (key := versioned_key(self.text)):
            raise ValueError(f"names {key!r}, a key of a versioned stack: say for which releases it holds (versions:)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _plain_text(cls, value: object) -> object:
        return {"text": value} if isinstance(value, str) else value  # a plain string is a general step

    _one_stack = field_validator("stack", "gpu", mode="before")(lambda v: [v] if isinstance(v, str) else v)


class Link(BaseModel):
    """A link as it was seen: a `fix` (a merged change, with where its merge was seen and the first release that
    ships it), a `proposal` (a change not merged: open, or closed unmerged), an `issue` or `docs`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https://\S+$")
    kind: Literal["fix", "proposal", "issue", "docs"]
    title: str = Field(min_length=3)
    merged: str | None = Field(default=None, description="a fix: the commit on the default branch that merged it")
    released_in: str | None = Field(
        default=None, description="a fix: '<package> <version>', the first release holding it, or 'unreleased'")
    stack: list[Stack] = Field(default_factory=list, description="the stack(s) this link is for; none: any run")

    _one_stack = field_validator("stack", mode="before")(lambda v: [v] if isinstance(v, str) else v)

    @model_validator(mode="after")
    def _evidence(self) -> Link:
        from errmap.kb import versions

        if self.kind == "fix":
            if not self.merged or not self.released_in:
                raise ValueError("a fix says where its merge was seen (merged:) and which release ships it (released_in:)")
            if self.released_in != "unreleased" and versions.release(self.released_in) is None:
                raise ValueError(f"released_in {self.released_in!r} is not '<package> <version>' or 'unreleased'")
        elif self.merged or self.released_in:
            raise ValueError(f"only a fix has merged: and released_in: (this link is {self.kind!r})")
        return self


class Check(BaseModel):
    """A confirmation rule: compare a probed fact with a constant or a capture."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: str
    field: str | None = Field(default=None, description="key inside the probe's fact, when it is a mapping")
    op: Literal["<", "<=", ">", ">=", "==", "!=", "contains", "missing", "present"]
    value: str | float | int | bool | None = None
    capture: str | None = Field(default=None, description="compare with this capture instead of `value`")
    against: str | None = Field(default=None, description="compare with the fact of this other probe instead")
    against_field: str | None = Field(default=None, description="key inside the other probe's fact")
    verdict: Literal["confirmed", "refuted"]
    says: str = Field(min_length=3, description="the sentence shown when the rule fires")

    @model_validator(mode="after")
    def _one_target(self) -> Check:
        targets = [t for t in (self.value is not None, self.capture, self.against) if t]
        if len(targets) > 1:
            raise ValueError("give one of value, capture or against")
        if not targets and self.op not in ("missing", "present"):
            raise ValueError(f"op {self.op!r} needs a value, capture or against")
        if self.against_field and not self.against:
            raise ValueError("against_field needs against")
        return self


Scalar = str | float | int | bool


class Condition(BaseModel):
    """One test of a prediction: a probed fact or a training setting against a target.

    A setting is the user's override, else verl's default; a fact about several GPUs holds when
    any GPU satisfies it. `name` binds the subject for the sentence ({name}), `target_name` the target.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    fact: str | None = Field(default=None, description="a probe's fact: of the machine, of each data file (data.*) or of the model (model.*)")
    setting: str | None = Field(default=None, description="a training setting (dotted verl key)")
    field: str | None = Field(default=None, description="key inside the fact, when it is a mapping")
    captures: dict[str, str] = Field(default_factory=dict, description="what the probe reads as the log's captures")
    part: Literal["major"] | None = Field(default=None, description="compare only this part of a version")
    op: Literal["<", "<=", ">", ">=", "==", "!=", "contains", "missing", "present", "in"]
    value: Scalar | list[Scalar] | None = None
    against: str | None = Field(default=None, description="compare with this other fact")
    against_field: str | None = None
    against_setting: str | list[str] | None = Field(default=None, description="compare with this setting (a list: their sum; with missing/present: each)")
    name: str | None = Field(default=None, pattern=r"^\w+$")
    target_name: str | None = Field(default=None, pattern=r"^\w+$")

    @model_validator(mode="after")
    def _shape(self) -> Condition:
        if (self.fact is None) == (self.setting is None):
            raise ValueError("give one of fact or setting")
        if self.setting is not None and (self.field or self.captures):
            raise ValueError("field and captures are for a fact")
        targets = [t for t in (self.value is not None, self.against, self.against_setting) if t]
        if len(targets) > 1 and not (self.op in ("missing", "present") and self.against is None):
            raise ValueError("give one of value, against or against_setting")
        if not targets and self.op not in ("missing", "present"):
            raise ValueError(f"op {self.op!r} needs a value, against or against_setting")
        if self.op == "in" and not isinstance(self.value, list):
            raise ValueError("op 'in' takes a list value")
        if isinstance(self.value, list) and self.op not in ("in", "missing", "present"):
            raise ValueError("a list value is for in, missing and present")
        if isinstance(self.against_setting, list) and self.op not in ("<", "<=", ">", ">=", "==", "!=", "missing", "present"):
            raise ValueError("a list of settings is summed for a comparison or tested each for missing/present")
        if self.against_field and not self.against:
            raise ValueError("against_field needs against")
        if self.target_name and not targets:
            raise ValueError("target_name needs a target")
        from errmap.kb.predict import is_verl_key
        from errmap.probes import PROBES

        for name in (self.fact, self.against):
            if name and name not in PROBES:
                raise ValueError(f"unknown fact {name!r} (errmap/probes names them)")
        keys = [self.setting] if self.setting else []
        keys += [self.against_setting] if isinstance(self.against_setting, str) else list(self.against_setting or [])
        for key in keys:
            if not is_verl_key(key):
                raise ValueError(f"setting {key!r} is not a key of verl's PPO trainer config (errmap/probes/verl_keys.txt)")
        return self


class Prediction(BaseModel):
    """What `errmap doctor` warns about before a run: conditions that all hold, and the sentence it
    says; or a named mechanism of errmap/predict.py with its parameters and a sentence per case.
    An entry's plain predictions are alternatives: the first that holds gives its warning."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: list[Condition] = Field(default_factory=list)
    mechanism: str | None = Field(default=None, description="a rule errmap/predict.py runs (MECHANISMS)")
    params: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict, description="the mechanism's settings and numbers")
    says: str | dict[str, str] = Field(description="the warning ({name} of a condition, {file}, {model}); a mechanism: one per case")
    show: list[str] = Field(default_factory=list, description="facts attached to the warning (default: those the conditions read)")

    @model_validator(mode="after")
    def _shape(self) -> Prediction:
        if (self.mechanism is None) == (not self.when):
            raise ValueError("give when (conditions) or a mechanism")
        if self.mechanism is None and (self.params or not isinstance(self.says, str)):
            raise ValueError("params and a mapping of says are for a mechanism")
        if self.mechanism is not None and not isinstance(self.says, dict):
            raise ValueError("a mechanism says one sentence per case: a mapping case -> sentence")
        texts = [self.says] if isinstance(self.says, str) else list(self.says.values())
        if any(len(t) < 3 for t in texts):
            raise ValueError("says: a sentence of 3 characters at least")
        from errmap.probes import PROBES

        for name in self.show:
            if name not in PROBES:
                raise ValueError(f"show: unknown fact {name!r}")
        if self.mechanism is not None:
            from errmap.kb.predict import MECHANISMS, is_verl_key

            m = MECHANISMS.get(self.mechanism)
            if m is None:
                raise ValueError(f"unknown mechanism {self.mechanism!r} (known: {', '.join(MECHANISMS)})")
            if missing := [k for k in m.params if k not in self.params]:
                raise ValueError(f"mechanism {self.mechanism} needs params {', '.join(missing)}")
            if extra := [k for k in self.params if k not in m.params]:
                raise ValueError(f"mechanism {self.mechanism} takes no params {', '.join(extra)}")
            if set(self.says) != set(m.cases):
                raise ValueError(f"mechanism {self.mechanism} says one sentence for each of its cases: {', '.join(m.cases)}")
            for key, kind in m.params.items():
                value = self.params[key]
                if kind == "setting" and not (isinstance(value, str) and is_verl_key(value)):
                    raise ValueError(f"params.{key}: {value!r} is not a key of verl's PPO trainer config")
                if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    raise ValueError(f"params.{key}: {value!r} is not a number")
                if kind == "list" and not isinstance(value, list):
                    raise ValueError(f"params.{key}: {value!r} is not a list")
            for text in self.says.values():
                for n in PLACEHOLDER.findall(text):
                    if n not in m.names:
                        raise ValueError(f"placeholder {{{n}}} is not one mechanism {self.mechanism} fills ({', '.join(m.names)})")
        else:
            names = {"file", "model"} | {n for c in self.when for n in (c.name, c.target_name) if n}
            for text in texts:
                for n in PLACEHOLDER.findall(text):
                    if n not in names:
                        raise ValueError(f"placeholder {{{n}}} is bound by no condition (name/target_name)")
        return self


class ExitCause(BaseModel):
    """`errmap run`: a command ended by this signal with nothing known in its output points at this code."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str = Field(description="a signal's name: SIGKILL, SIGTERM, ...")
    says: str = Field(min_length=3, description="the likely cause and how to confirm it")

    @field_validator("signal")
    @classmethod
    def _a_signal(cls, value: str) -> str:
        import signal

        if value not in signal.Signals.__members__:
            raise ValueError(f"{value!r} is not a signal of this system (SIGKILL, SIGTERM, ...)")
        return value


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    errno: int
    slug: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    title: str = Field(min_length=5)
    group: str
    role: Literal["root", "consequence"]
    summary: str = Field(min_length=10)
    anchors: list[Anchor] = Field(min_length=1)
    key: list[str] = Field(default_factory=list, description="captures that tell two incidents apart")
    cause: str = Field(default="", description="at least 10 characters; empty only in a draft of your own (kb new)")
    fix: list[Step] = Field(default_factory=list, description="at least one step; none only in a draft of your own")
    links: list[Link] = Field(default_factory=list, description="required for 1001-1048 (errmap.kb.model.OFFICIAL_RANGE), optional for your own")
    probes: list[str] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    predicts: list[Prediction] = Field(default_factory=list, description="what errmap doctor checks before a run")
    exits: list[ExitCause] = Field(default_factory=list, description="errmap run: signals this code likely explains")
    related: list[int] = Field(default_factory=list)
    caused_by: list[int] = Field(default_factory=list)
    applies_to: str | None = None
    hints: list[Annotated[str, Field(min_length=3)] | list[Annotated[str, Field(min_length=3)]]] = Field(
        default_factory=list,
        description="the words of its family: on a failure line no anchor explains, a hint whose words all occur "
                    "(case ignored) gives a likely diagnosis")
    unshown: dict[str, str] = Field(
        default_factory=dict,
        description="captures the cause and fix do not show, each with what reads it instead (a check, the key, the GPU detection)")

    @property
    def captures(self) -> set[str]:
        return set().union(*(a.groups for a in self.anchors))

    @model_validator(mode="after")
    def _consistent(self) -> Entry:
        from errmap.kb.gpus import PLACEHOLDERS

        names = self.captures
        for k in self.key:
            if k not in names:
                raise ValueError(f"key {k!r} is not a capture of any anchor")
        for text in [self.cause, *(s.text for s in self.fix)]:
            for name in PLACEHOLDER.findall(text):
                if name not in names and name not in PLACEHOLDERS:
                    raise ValueError(f"placeholder {{{name}}} is not a capture of any anchor")
        shown = set(PLACEHOLDER.findall(" ".join([self.cause, *(s.text for s in self.fix)])))
        for name in self.unshown:
            if name not in names:
                raise ValueError(f"unshown {name!r} is not a capture of any anchor")
            if name in shown:
                raise ValueError(f"unshown {name!r} is shown: a placeholder in the cause or fix names it")
        for check in self.checks:
            if check.capture and check.capture not in names:
                raise ValueError(f"check capture {check.capture!r} is not a capture of any anchor")
        if self.errno in self.caused_by:
            raise ValueError("an entry cannot be caused by itself")
        if self.cause and len(self.cause) < 10:
            raise ValueError("cause: a few plain sentences (at least 10 characters)")
        return self


# ---------------------------------------------------------------- kb/gpus.yaml


class Architecture(BaseModel):
    """What follows from a compute capability, with the pages that say so."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capability: str = Field(pattern=r"^\d+\.\d+$")
    architecture: str = Field(min_length=3)
    bf16: bool | None = None
    fp16: Literal["full", "slow", "tensor"] | None = None
    tensor_cores: bool | None = None
    shared_memory_per_block: int | None = Field(default=None, gt=0, description="opt-in maximum per thread block, bytes")
    flash_attention_2: bool | None = None
    vllm_wheels: bool | None = None
    torch_wheels: list[Annotated[str, Field(pattern=r"^cu\d+$")]] = Field(default_factory=list)
    sources: list[Annotated[str, Field(pattern=r"^https://\S+$")]] = Field(min_length=1)


class Model(BaseModel):
    """One GPU model: the names NVML/torch print for it, its compute capability, its memory where sourced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=2)
    names: list[str] = Field(min_length=1, description="patterns of the whole printed name, without a leading 'NVIDIA '")
    capability: str = Field(pattern=r"^\d+\.\d+$")
    source: str = Field(pattern=r"^https://\S+$")
    memory_gb: int | None = Field(default=None, gt=0)
    memory_source: str | None = Field(default=None, pattern=r"^https://\S+$")

    @field_validator("names")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for p in value:
            try:
                regex.compile(p)
            except regex.error as exc:
                raise ValueError(f"pattern {p!r} does not compile: {exc}") from None
        return value


class GpuTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    architectures: list[Architecture] = Field(min_length=1)
    gpus: list[Model] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> GpuTable:
        caps = {a.capability for a in self.architectures}
        for m in self.gpus:
            if m.capability not in caps:
                raise ValueError(f"{m.name}: no architecture row for compute capability {m.capability}")
        return self
