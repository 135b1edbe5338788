"""The knowledge base: one YAML file per errno, validated (errmap/schema.py) into `Entry` values.

Loading never executes anything from YAML (safe loader only) and every problem names its file
and line, so a broken entry is as easy to fix as a compiler error. Validated entries are cached as
JSON, keyed by the names, sizes and times of the KB files, so a run whose KB did not change reads
one file and imports neither YAML parsing nor pydantic.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import regex
import yaml

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


# The stacks a fix step or link can be for, as schema.Stack lists them, with the names shown to users.
STACKS = {
    "verl": "verl",
    "trl": "TRL",
    "openrlhf": "OpenRLHF",
    "llamafactory": "LLaMA-Factory",
    "deepspeed": "DeepSpeed / accelerate",
    "serving": "vLLM / SGLang serving",
    "pytorch": "PyTorch / HF Trainer",
}


def _stacks(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class Step:
    """One fix step; `stack` names the stacks it is for, empty when it is general; `gpu` the conditions
    on the run's GPU (errmap.gpus.shown), empty for any GPU."""

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
    """A validated KB entry (see errmap/schema.py for the rules each field obeys)."""

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

    def steps_by_stack(self) -> list[tuple[str | None, list[tuple[int, Step]]]]:
        """The fix steps, numbered as in the KB, grouped: the general ones first, then each stack's."""
        groups: dict[str | None, list[tuple[int, Step]]] = {}
        for i, step in enumerate(self.fix, 1):
            groups.setdefault(", ".join(STACKS[s] for s in step.stack) or None, []).append((i, step))
        return sorted(groups.items(), key=lambda g: g[0] is not None)

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


MAX_FILE = 1 << 20  # bytes of one KB file (the largest shipped is ~15 KB)


def _read(path: Path) -> str:
    """A KB file's text: a regular file (a link is followed) of at most MAX_FILE bytes, in UTF-8."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise KBError([f"{path}:1: not a regular file"])
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            raise KBError([f"{path}:1: larger than {MAX_FILE // 1024} KB; a KB file holds one entry"])
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KBError([f"{path}:1: cannot read: {exc}"]) from None


def _parse(path: Path, text: str) -> Any:
    """The YAML document, refusing aliases: `*name` can expand exponentially (billion laughs) or
    refer to itself, and an entry has nothing to share."""
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                raise KBError([f"{path}:{event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed in a KB file; "
                               "write the value out"])
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise KBError([f"{path}:{line}: invalid YAML: {getattr(exc, 'problem', exc)}"]) from None


def load_entry(path: Path, allowed: range = OFFICIAL_RANGE) -> Entry:
    """Parse and validate one KB file; raise KBError with file:line for every problem."""
    text = _read(path)
    data = _parse(path, text)
    if not isinstance(data, dict):
        raise KBError([f"{path}:1: expected a mapping of fields"])
    from pydantic import ValidationError

    from errmap.kb import schema

    try:
        entry = Entry.from_dict(schema.Entry.model_validate(data).model_dump())
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
    if not entry.links and allowed == OFFICIAL_RANGE:
        raise KBError([f"{path}:1: links: an errmap code needs at least one upstream link (your own entries, "
                       f"{USER_RANGE.start}-{USER_RANGE.stop - 1}, may have none)"])
    if not path.name.startswith(f"{entry.errno}-{entry.slug}."):
        raise KBError([f"{path}:1: file name must be {entry.errno}-{entry.slug}.yaml"])
    return entry


def official_dir() -> Path:
    """kb/ beside the package in a checkout, else the copy installed inside the package."""
    here = Path(__file__).resolve().parent.parent  # the errmap package
    for cand in (here.parent / "kb", here / "_kb"):
        if cand.is_dir():
            return cand
    raise KBError([f"{here}: the knowledge base folder kb/ is missing from this installation"])


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


def _load_dir(folder: Path, allowed: range) -> tuple[dict[int, Entry], list[str]]:
    entries: dict[int, Entry] = {}
    problems: list[str] = []
    for path in sorted(folder.glob("[0-9]*.y*ml")):  # entries are <errno>-<slug>.yaml; glossary.yaml is not one
        try:
            entry = load_entry(path, allowed)
        except KBError as exc:
            problems.extend(exc.problems)
            continue
        except Exception as exc:  # noqa: BLE001 - whatever a hostile file does, it costs its own entry only
            problems.append(f"{path}:1: cannot load: {type(exc).__name__}: {exc}"[:500])
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
    signals: dict[str, int] = {}
    hints: dict[frozenset[str], int] = {}
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
        for x in e.exits:
            if x.signal in signals:
                problems.append(f"{where}: {x.signal} is already the exit cause of {signals[x.signal]}")
            signals[x.signal] = e.errno
        for h in e.hints:
            # readings.hinted lets the most specific hint win: two entries with the same words cannot be told apart
            if (other := hints.setdefault(frozenset(h), e.errno)) != e.errno:
                problems.append(f"{where}: hint {' + '.join(h)!r} is also a hint of {other}: nothing tells them apart")
    return problems


CACHE_VERSION = 5


def cache_dir() -> Path:
    return Path(os.environ.get("ERRMAP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "errmap"
    ))


def write_cache(path: Path, data: bytes) -> bool:
    """Write a cache file whole or not at all (a reader never sees half of it); False where the home is read-only."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return True
    except OSError:
        return False


def _cache_file(folders: list[tuple[Path, range]]) -> Path | None:
    """Where the validated KB of exactly these files is cached; None when there is nowhere to put it."""
    base = cache_dir()
    code = [Path(__file__), Path(__file__).with_name("schema.py"), Path(__file__).with_name("translations.py")]
    h = hashlib.sha256(f"{CACHE_VERSION} {[p.stat().st_mtime_ns for p in code]}".encode())
    for folder, allowed in folders:
        h.update(f"|{folder.resolve()}:{allowed.start}".encode())
        try:
            names = sorted(os.scandir(folder), key=lambda d: d.name)
        except OSError:
            continue
        try:  # the Chinese sidecars in <folder>/zh/ too
            names += sorted(os.scandir(folder / "zh"), key=lambda d: d.name)
        except OSError:
            pass
        for d in names:
            if d.name.endswith((".yaml", ".yml")):
                try:
                    st = d.stat()
                except OSError:  # a dangling or looping link: load() reports it
                    h.update(f"/{d.path}:?".encode())
                    continue
                h.update(f"/{d.path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return Path(base) / f"kb-{h.hexdigest()[:24]}.json"


CACHE_KEEP = 8  # cached KB states kept (one per set of KB files); older ones are removed


def _prune(cache: Path) -> None:
    """Remove all but the CACHE_KEEP newest cached KB states beside `cache`."""
    states = sorted(cache.parent.glob("kb-*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in states[CACHE_KEEP:]:
        old.unlink(missing_ok=True)


def load(extra: list[Path] | None = None) -> KB:
    """The official KB plus user folders (`extra`, ERRMAP_KB_PATH).

    Never fatal: an entry that does not validate is skipped and reported in `warnings`, so one bad
    file costs its own code and nothing else. `errmap kb check` is the strict gate.
    """
    env = os.environ.get("ERRMAP_KB_PATH", "")
    folders = [(official_dir(), OFFICIAL_RANGE)]
    folders += [(f, USER_RANGE) for f in [*(extra or []), *(Path(p) for p in env.split(os.pathsep) if p)]]
    cache = _cache_file(folders)
    try:
        cached = json.loads(cache.read_text())
        from errmap.kb.translations import Text

        return KB({e["errno"]: Entry.from_dict(e) for e in cached["entries"]}, tuple(cached["warnings"]),
                  {int(n): Text.from_dict(t) for n, t in cached["zh"].items()})
    except (OSError, ValueError, KeyError, TypeError):
        pass
    entries: dict[int, Entry] = {}
    warnings: list[str] = []
    zh: dict[int, Any] = {}
    for folder, allowed in folders:
        if not folder.is_dir():
            warnings.append(f"{folder}: not a folder; knowledge base skipped")
            continue
        found, bad = _load_dir(folder, allowed)
        warnings += bad
        entries.update(found)
        zh.update(_translations(folder, found, warnings))
    warnings += cross_check(entries)
    doc = {"entries": [e.to_dict() for e in entries.values()], "warnings": warnings,
           "zh": {n: asdict(t) for n, t in zh.items()}}
    if write_cache(cache, json.dumps(doc).encode()):  # a read-only home: run without a cache
        _prune(cache)
    return KB(entries, tuple(warnings), zh)


def _translations(folder: Path, entries: dict[int, Entry], problems: list[str]) -> dict[int, Any]:
    """The Chinese sidecars of a folder's entries (kb/zh/<file name>), by errno; problems appended."""
    from errmap.kb.translations import load_dir

    texts, bad = load_dir(folder)
    problems += bad
    by_file = {f"{e.errno}-{e.slug}": e.errno for e in entries.values()}
    out = {}
    for name, text in texts.items():
        errno = by_file.get(name.rsplit(".", 1)[0])
        if errno is None:
            problems.append(f"{text.file}:1: no KB entry {name} for this Chinese text")
        else:
            out[errno] = text
    return out
