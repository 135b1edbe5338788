"""The knowledge base: one YAML file per errno, validated into `Entry` models.

Loading never executes anything from YAML (safe loader only) and every problem names
its file and line, so a broken entry is as easy to fix as a compiler error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

OFFICIAL_RANGE = range(1001, 1049)
USER_RANGE = range(9000, 10000)
PLACEHOLDER = regex.compile(r"\{(\w+)\}")


def _unescape(pattern: str) -> str:
    """The regex source with escapes of punctuation removed, to check that literals occur in it."""
    return regex.sub(r"\\([^\w\s])", r"\1", pattern)


class Anchor(BaseModel):
    """One real message: a required literal for the prefilter and the full pattern."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    literal: str | list[str] = Field(description="substring(s) of the raw line; one must occur")
    regex: str = Field(description="pattern run on the line without its rank/Ray prefix")
    source: str = Field(min_length=3, description="where the message comes from: upstream file or issue URL")
    any_level: bool = Field(default=False, description="also match inside INFO/WARNING records")

    @property
    def literals(self) -> list[str]:
        return [self.literal] if isinstance(self.literal, str) else list(self.literal)

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            regex.compile(value)
        except regex.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from None
        return value

    @model_validator(mode="after")
    def _literals_in_pattern(self) -> Anchor:
        text = _unescape(self.regex)
        for lit in self.literals:
            if len(lit) < 4:
                raise ValueError(f"literal {lit!r} is too short to prefilter (4 characters at least)")
            if lit not in text:
                raise ValueError(f"literal {lit!r} does not occur in the regex as written")
        return self

    @cached_property
    def compiled(self) -> regex.Pattern[str]:
        return regex.compile(self.regex)

    @property
    def groups(self) -> set[str]:
        return set(self.compiled.groupindex)


class Link(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https://\S+$")
    kind: Literal["patch", "docs", "issue", "release"]
    title: str = Field(min_length=3)
    fixed_in: str | None = Field(default=None, description="release that fixed it, where known")


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
    fix: list[str] = Field(min_length=1)
    links: list[Link] = Field(min_length=1)
    probes: list[str] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    related: list[int] = Field(default_factory=list)
    caused_by: list[int] = Field(default_factory=list)
    applies_to: str | None = None

    @property
    def captures(self) -> set[str]:
        return set().union(*(a.groups for a in self.anchors))

    @model_validator(mode="after")
    def _consistent(self) -> Entry:
        names = self.captures
        for k in self.key:
            if k not in names:
                raise ValueError(f"key {k!r} is not a capture of any anchor")
        for text in [self.cause, *self.fix]:
            for name in PLACEHOLDER.findall(text):
                if name not in names:
                    raise ValueError(f"placeholder {{{name}}} is not a capture of any anchor")
        for check in self.checks:
            if check.capture and check.capture not in names:
                raise ValueError(f"check capture {check.capture!r} is not a capture of any anchor")
        if self.errno in self.caused_by:
            raise ValueError("an entry cannot be caused by itself")
        return self

    def fill(self, text: str, captures: dict[str, str]) -> str:
        """Put captured values into a cause or fix text; a capture this match lacks shows as <name>."""
        names = self.captures
        return PLACEHOLDER.sub(
            lambda m: captures.get(m[1]) or f"<{m[1]}>" if m[1] in names else m[0], text
        )


class KBError(Exception):
    """Problems found while loading: each a 'file:line: message' string."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def _line_map(node: yaml.Node, path: tuple = ()) -> dict[tuple, int]:
    """Map each key path in a composed YAML document to its 1-based line."""
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            lines.update(_line_map(v, path + (k.value,)))
            lines[path + (k.value,)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines.update(_line_map(v, path + (i,)))
    return lines


def _line_of(lines: dict[tuple, int], loc: tuple) -> int:
    while loc not in lines and loc:
        loc = loc[:-1]
    return lines.get(loc, 1)


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when the wheel has it: 10x faster


def load_entry(path: Path, allowed: range = OFFICIAL_RANGE) -> Entry:
    """Parse and validate one KB file; raise KBError with file:line for every problem."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_Loader)
    except (OSError, UnicodeDecodeError) as exc:
        raise KBError([f"{path}:1: cannot read: {exc}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise KBError([f"{path}:{line}: invalid YAML: {getattr(exc, 'problem', exc)}"]) from None
    if not isinstance(data, dict):
        raise KBError([f"{path}:1: expected a mapping of fields"])
    try:
        entry = Entry.model_validate(data)
    except ValidationError as exc:
        lines = _line_map(yaml.compose(text, Loader=_Loader))  # positions only when there is a problem
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            where = ".".join(str(p) for p in loc) or "entry"
            problems.append(f"{path}:{_line_of(lines, loc)}: {where}: {err['msg']}")
        raise KBError(problems) from None
    if entry.errno not in allowed:
        line = _line_map(yaml.compose(text, Loader=_Loader)).get(("errno",), 1)
        raise KBError([f"{path}:{line}: errno {entry.errno} outside {allowed.start}-{allowed.stop - 1}"])
    if not path.name.startswith(f"{entry.errno}-{entry.slug}."):
        raise KBError([f"{path}:1: file name must be {entry.errno}-{entry.slug}.yaml"])
    return entry


def official_dir() -> Path:
    """kb/ beside the package in a checkout, else the copy installed inside the package."""
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "kb", here / "_kb"):
        if cand.is_dir():
            return cand
    raise KBError([f"{here}: the knowledge base folder kb/ is missing from this installation"])


@dataclass(frozen=True)
class KB:
    entries: dict[int, Entry]
    warnings: tuple[str, ...] = ()

    def get(self, code: str | int) -> Entry | None:
        """Look up by errno ('1012') or slug ('triton-shared-memory')."""
        text = str(code).strip().lower().removeprefix("e")
        if text.isdigit():
            return self.entries.get(int(text))
        return next((e for e in self.entries.values() if e.slug == text), None)

    def __iter__(self):
        return iter(sorted(self.entries.values(), key=lambda e: e.errno))

    def __len__(self) -> int:
        return len(self.entries)


def _load_dir(folder: Path, allowed: range) -> tuple[dict[int, Entry], list[str]]:
    entries: dict[int, Entry] = {}
    problems: list[str] = []
    for path in sorted(folder.glob("*.y*ml")):
        try:
            entry = load_entry(path, allowed)
        except KBError as exc:
            problems.extend(exc.problems)
            continue
        if entry.errno in entries:
            problems.append(f"{path}:1: errno {entry.errno} defined twice")
            continue
        entries[entry.errno] = entry
    return entries, problems


def cross_check(entries: dict[int, Entry]) -> list[str]:
    """Relations that only the whole KB can check: references to codes, unique slugs, probe names."""
    from errmap.probes import PROBES

    problems = []
    slugs: dict[str, int] = {}
    for e in entries.values():
        where = f"{e.errno}-{e.slug}"
        if e.slug in slugs:
            problems.append(f"{where}: slug also used by {slugs[e.slug]}")
        slugs[e.slug] = e.errno
        for ref in [*e.related, *e.caused_by]:
            if ref not in entries:
                problems.append(f"{where}: refers to unknown errno {ref}")
        for name in [*e.probes, *(c.probe for c in e.checks), *(c.against for c in e.checks if c.against)]:
            if name not in PROBES:
                problems.append(f"{where}: unknown probe {name!r}")
    return problems


def load(extra: list[Path] | None = None) -> KB:
    """The official KB plus user folders (`extra`, ERRMAP_KB_PATH).

    Never fatal: an entry that does not validate is skipped and reported in `warnings`, so one bad
    file costs its own code and nothing else. `errmap kb check` is the strict gate.
    """
    env = os.environ.get("ERRMAP_KB_PATH", "")
    folders = [(official_dir(), OFFICIAL_RANGE)]
    folders += [(f, USER_RANGE) for f in [*(extra or []), *(Path(p) for p in env.split(os.pathsep) if p)]]
    entries: dict[int, Entry] = {}
    warnings: list[str] = []
    for folder, allowed in folders:
        if not folder.is_dir():
            warnings.append(f"{folder}: not a folder; knowledge base skipped")
            continue
        found, bad = _load_dir(folder, allowed)
        warnings += bad
        entries.update(found)
    warnings += cross_check(entries)
    return KB(entries, tuple(warnings))
