"""The KB's runtime types: plain frozen dataclasses built from validated YAML (errmap/kb/schema.py has the
pydantic models that validate it) or from the JSON cache, so a warm run never imports pydantic."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import regex

from errmap.kb import stacks


OFFICIAL_RANGE = range(1001, 1049)


USER_RANGE = range(9000, 10000)


PLACEHOLDER = regex.compile(r"\{(\w+)\}")


OPTIONAL = regex.compile(r"\[\[(.*?)\]\]", flags=regex.DOTALL)


# A leading `^` in an anchor means "where a message starts", wherever that is in the line: at a
# non-blank character at the line's start or after a blank, a separator or a non-ASCII character
# (so `svc-1  | `, `[pod/x] `, `3: `, a journald header, `"msg": "` or a translated preamble never
# hide a message, while `my.RuntimeError` does not match at `RuntimeError`).
# `^(?=` and `^(?!` stay whole-line tests.
MESSAGE_START = r"(?:^|(?<=[\s|\])>:;,=\"\x80-\U0010ffff]))(?=\S)"


def message_regex(pattern: str) -> str:
    """An anchor's pattern as run: a leading `^` becomes MESSAGE_START."""
    if pattern.startswith("^") and not pattern.startswith(("^(?=", "^(?!")):
        return MESSAGE_START + pattern[1:]
    return pattern


@dataclass(frozen=True)
class Anchor:
    """One real message: the literal(s) for the prefilter and the full pattern."""

    literal: str | list[str]
    regex: str
    source: str
    unless: str | None = None  # a look-alike: the anchor does not count on a line this matches
    frame: str | None = None  # the failure's traceback must hold a frame this matches
    sites: tuple[tuple[str, str, str], ...] = ()  # (repository, path, version) of each place that prints it

    def __post_init__(self) -> None:
        object.__setattr__(self, "sites", tuple(
            (s["repo"], s["path"], s["version"]) if isinstance(s, dict) else tuple(s) for s in self.sites))

    @property
    def literals(self) -> list[str]:
        return [self.literal] if isinstance(self.literal, str) else list(self.literal)

    @cached_property
    def compiled(self) -> regex.Pattern[str]:
        return regex.compile(message_regex(self.regex))

    @cached_property
    def folded(self) -> regex.Pattern[str]:
        """The pattern with case ignored, for a message retyped in another case (readings.folded)."""
        return regex.compile(message_regex(self.regex), regex.IGNORECASE)

    @cached_property
    def guard(self) -> regex.Pattern[str] | None:
        return regex.compile(self.unless) if self.unless else None

    @cached_property
    def frames(self) -> regex.Pattern[str] | None:
        return regex.compile(self.frame) if self.frame else None

    @property
    def groups(self) -> set[str]:
        return set(self.compiled.groupindex)


def _stacks(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class Step:
    """One fix step; `stack` names the stacks it is for, empty when it is general; `gpu` the conditions
    on the run's GPU (errmap.kb.gpus.shown), empty for any GPU."""

    text: str
    stack: tuple[str, ...] = ()
    gpu: tuple[str, ...] = ()
    versions: tuple[tuple[str, str], ...] = ()  # (package, specifier): the releases it holds for
    seen: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stack", _stacks(self.stack))
        object.__setattr__(self, "gpu", _stacks(self.gpu))
        object.__setattr__(self, "versions", tuple(
            (p, s) for p, s in (self.versions.items() if isinstance(self.versions, dict) else self.versions)))

    @property
    def releases(self) -> str:
        """The releases it holds for, as people read them: "verl <0.6, vllm >=0.8"; empty for any."""
        return ", ".join(f"{p} {s}".strip() for p, s in self.versions if s)


@dataclass(frozen=True)
class Link:
    url: str
    kind: str  # fix, proposal, issue or docs (schema.Link)
    title: str
    merged: str | None = None  # a fix: where its merge was seen
    released_in: str | None = None  # a fix: "<package> <version>" of the first release that ships it, or "unreleased"
    stack: tuple[str, ...] = ()  # the stacks it is for, empty when it is general

    def __post_init__(self) -> None:
        object.__setattr__(self, "stack", _stacks(self.stack))


@dataclass(frozen=True)
class Check:
    """A confirmation rule: compare a probed fact with a constant, a capture or another fact."""

    probe: str
    op: str
    verdict: str
    says: str
    field: str | None = None
    value: str | float | int | bool | None = None
    capture: str | None = None
    against: str | None = None
    against_field: str | None = None


@dataclass(frozen=True)
class Condition:
    """One test of a prediction (schema.Condition): a fact or a setting against a target."""

    op: str
    fact: str | None = None
    setting: str | None = None
    captures: dict[str, str] = field(default_factory=dict)  # before `field`, which shadows dataclasses.field here
    field: str | None = None
    part: str | None = None
    value: Any = None
    against: str | None = None
    against_field: str | None = None
    against_setting: str | list[str] | None = None
    name: str | None = None
    target_name: str | None = None


@dataclass(frozen=True)
class Prediction:
    """What `errmap doctor` warns about before a run (schema.Prediction)."""

    says: str | dict[str, str]
    when: tuple[Condition, ...] = ()
    mechanism: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    show: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "when", tuple(c if isinstance(c, Condition) else Condition(**c) for c in self.when))
        object.__setattr__(self, "show", tuple(self.show))

    @property
    def sentences(self) -> list[str]:
        """Its sentences in order: the one it says, or one per case of a mechanism."""
        return [self.says] if isinstance(self.says, str) else list(self.says.values())


@dataclass(frozen=True)
class ExitCause:
    """`errmap run`: a command ended by `signal` with nothing known in its output likely hit this code."""

    signal: str
    says: str


@dataclass(frozen=True)
class Entry:
    """A validated KB entry (see errmap/kb/schema.py for the rules each field obeys)."""

    errno: int
    slug: str
    title: str
    group: str
    role: str
    summary: str
    anchors: tuple[Anchor, ...]
    cause: str
    fix: tuple[Step, ...]
    links: tuple[Link, ...]
    key: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    predicts: tuple[Prediction, ...] = ()
    exits: tuple[ExitCause, ...] = ()
    related: tuple[int, ...] = ()
    caused_by: tuple[int, ...] = ()
    applies_to: str | None = None
    unshown: tuple[tuple[str, str], ...] = ()  # (capture, what reads it instead of the cause and fix)
    hints: tuple[tuple[str, ...], ...] = ()  # the words of its family, lowercased: each hint's words must all occur

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Entry:
        nested = {"anchors": Anchor, "fix": Step, "links": Link, "checks": Check, "predicts": Prediction, "exits": ExitCause}
        d = {**d, "unshown": tuple(map(tuple, dict(d.get("unshown", ())).items())),
             "hints": tuple(tuple(w.lower() for w in ([h] if isinstance(h, str) else h)) for h in d.get("hints", ()))}
        return cls(**{
            k: tuple(nested[k](**x) for x in v) if k in nested else tuple(v) if isinstance(v, list) else v
            for k, v in d.items()
        })

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def numbered_steps(self, lang: str = "en") -> list[tuple[int, Step, str]]:
        """The fix steps as errmap numbers them everywhere: by their place in the KB, 1..N, in that order; each with
        the stacks it is for (named in `lang`) where its text does not name one before its first colon, else ''."""
        out = []
        for n, step in enumerate(self.fix, 1):
            head = regex.split(r"[:：]", step.text, maxsplit=1)[0].lower()
            named = any(part.split()[0].lower() in head for s in step.stack for part in (s, *stacks.name(s, "en").split(" / ")))
            out.append((n, step, "" if named else ("、" if lang == "zh" else ", ").join(stacks.name(s, lang) for s in step.stack)))
        return out

    def fitting_steps(self, stack: str | None, gpu: Any = None) -> list[tuple[int, Step]]:
        """The fix steps for a run of `stack` on `gpu` (errmap.kb.stacks.fitting, errmap.kb.gpus.fitting) with their
        numbers (numbered_steps), in the KB's order: a number left out is a step for another run."""
        from errmap.kb.gpus import fitting as for_gpu

        fit = {id(s) for s in for_gpu(stacks.fitting(self.fix, stack), gpu)}
        return [(n, s) for n, s in enumerate(self.fix, 1) if id(s) in fit]

    @property
    def captures(self) -> set[str]:
        return set().union(*(a.groups for a in self.anchors))

    def fill(self, text: str, captures: dict[str, str] | None = None) -> str:
        """Put captured values into a cause or fix text.

        `[[ ... ]]` marks an optional fragment: kept only when every capture it names was found.
        Without captures (`errmap explain`, the docs) the text is a template: the fragments, which say
        what one log gave, are left out and the other placeholders show as <name>.
        """
        from errmap.kb.gpus import PLACEHOLDERS

        names = self.captures | set(PLACEHOLDERS)
        if captures is None:
            text = OPTIONAL.sub("", text)
            captures = {}
        else:
            text = OPTIONAL.sub(
                lambda m: m[1] if all(captures.get(n) is not None for n in PLACEHOLDER.findall(m[1]) if n in names) else "",
                text,
            )

        def value(m: regex.Match) -> str:
            if m[1] not in names:
                return m[0]
            found = captures.get(m[1])
            return f"<{m[1]}>" if found is None else found

        return PLACEHOLDER.sub(value, text)


@dataclass(frozen=True)
class KB:
    entries: dict[int, Entry]
    warnings: tuple[str, ...] = ()
    zh: dict[int, Any] = field(default_factory=dict)  # errno -> translations.Text, from kb/zh/

    def localized(self, lang: str) -> KB:
        """The KB as people read it in `lang`: entries with a Chinese text show it for zh."""
        if lang != "zh":
            return self
        from errmap.kb.translations import localize

        return KB({n: localize(e, self.zh.get(n)) for n, e in self.entries.items()}, self.warnings, self.zh)

    def get(self, code: str | int) -> Entry | None:
        """Look up by errno ('1012') or slug ('triton-shared-memory')."""
        text = str(code).strip().lower().removeprefix("e")
        if text.isdigit():
            return self.entries.get(int(text))
        return next((e for e in self.entries.values() if e.slug == text), None)

    def exit_causes(self) -> dict[str, tuple[int, str]]:
        """signal name -> (errno, what it says): the likely cause of a command that signal ended
        when its output names none (`exits:` of an entry)."""
        return {x.signal: (e.errno, x.says) for e in self for x in e.exits}

    def __iter__(self):
        return iter(sorted(self.entries.values(), key=lambda e: e.errno))

    def __len__(self) -> int:
        return len(self.entries)
