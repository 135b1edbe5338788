"""The schema of a KB entry: pydantic models that validate each YAML file.

Used only when an entry is read from YAML (a cold cache, `errmap kb check`, the docs build); a run
with a warm cache never imports pydantic. `errmap.kb` holds the plain runtime types.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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


class Anchor(BaseModel):
    """One real message: a required literal for the prefilter and the full pattern."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    literal: str | list[str] = Field(description="substring(s) of the raw line; one must occur")
    regex: str = Field(description="pattern searched in the line; a leading ^ means where a message starts")
    source: str = Field(min_length=3, description="where the message comes from: upstream file or issue URL")
    unless: str | None = Field(default=None, description="a look-alike: no match on a line this pattern finds")
    frame: str | None = Field(default=None, description="a frame ('path:function  source line') of the failure's traceback must match")

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


# The software stacks a fix step or link can be for (errmap.kb.STACKS names them); none means general.
Stack = Literal["verl", "trl", "openrlhf", "llamafactory", "deepspeed", "serving", "pytorch"]


class Step(BaseModel):
    """One fix step: its text and the stack(s) it is for; without `stack` it is general."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = Field(min_length=3)
    stack: list[Stack] = Field(default_factory=list, description="the stack(s) this step is for; none: any run")

    @model_validator(mode="before")
    @classmethod
    def _plain_text(cls, value: object) -> object:
        return {"text": value} if isinstance(value, str) else value  # a plain string is a general step

    _one_stack = field_validator("stack", mode="before")(lambda v: [v] if isinstance(v, str) else v)


class Link(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https://\S+$")
    kind: Literal["patch", "docs", "issue", "release"]
    title: str = Field(min_length=3)
    fixed_in: str | None = Field(default=None, description="release that fixed it, where known")
    stack: list[Stack] = Field(default_factory=list, description="the stack(s) this link is for; none: any run")

    _one_stack = field_validator("stack", mode="before")(lambda v: [v] if isinstance(v, str) else v)


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
    cause: str = Field(min_length=10)
    fix: list[Step] = Field(min_length=1)
    links: list[Link] = Field(default_factory=list, description="required for 1001-1048 (errmap.kb), optional for your own")
    probes: list[str] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    related: list[int] = Field(default_factory=list)
    caused_by: list[int] = Field(default_factory=list)
    applies_to: str | None = None
    unshown: dict[str, str] = Field(
        default_factory=dict,
        description="captures the cause and fix do not show, each with what reads it instead (a check, the key, the GPU detection)")

    @property
    def captures(self) -> set[str]:
        return set().union(*(a.groups for a in self.anchors))

    @model_validator(mode="after")
    def _consistent(self) -> Entry:
        names = self.captures
        for k in self.key:
            if k not in names:
                raise ValueError(f"key {k!r} is not a capture of any anchor")
        for text in [self.cause, *(s.text for s in self.fix)]:
            for name in PLACEHOLDER.findall(text):
                if name not in names:
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
        return self
