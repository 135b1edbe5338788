"""The KB in Chinese: kb/zh/<the entry's file name> holds the text a person reads, in Chinese.

A sidecar gives title, group, summary, cause, fix (one step per English step, in order), optionally
applies_to, says (one per check), predicts (one per sentence of the entry's predictions: a
mechanism's cases in order), exits (one per exit cause), links (one title per link, in order) and search (what
Chinese users type for the error that its text does not say: 爆显存 for 显存不足; the Chinese docs site finds
the page by them). What the software prints stays in
the English entry: anchors are never translated. `problems` is what `errmap kb check` enforces:
every entry translated, the same {captures}, the same `code spans` (config keys, commands,
messages), as many steps, checks and link titles as the English (titles checked like the rest), and kb/glossary.yaml's terms.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex
import yaml

FOLDER = "zh"
PLACEHOLDER = regex.compile(r"\{(\w+)\}")
CODE_SPAN = regex.compile(r"`[^`]+`")
HAN = regex.compile(r"\p{Han}")


@dataclass(frozen=True)
class Text:
    title: str
    group: str
    summary: str
    cause: str | None = None
    fix: tuple[str, ...] = ()
    applies_to: str | None = None
    says: tuple[str, ...] = ()
    predicts: tuple[str, ...] = ()
    exits: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    search: tuple[str, ...] = ()
    file: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Text:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def _schema():
    from typing import Annotated

    from pydantic import BaseModel, ConfigDict, Field

    class Sidecar(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)

        title: str = Field(min_length=2)
        group: str = Field(min_length=2)
        summary: str = Field(min_length=5)
        cause: str | None = Field(default=None, min_length=5)
        fix: list[str] = Field(default_factory=list)
        applies_to: str | None = None
        says: list[str] = Field(default_factory=list)
        predicts: list[str] = Field(default_factory=list)
        exits: list[str] = Field(default_factory=list)
        links: list[str] = Field(default_factory=list)
        search: list[Annotated[str, Field(min_length=2, max_length=24, pattern=r"^\S(?:.*\S)?$")]] = Field(default_factory=list)

    return Sidecar


def load_file(path: Path) -> Text:
    """One sidecar, validated; KBError with file:line for every problem."""
    from pydantic import ValidationError

    from errmap.kb.files import KBError, line_map, line_of, Loader

    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=Loader)
    except (OSError, UnicodeDecodeError) as exc:
        raise KBError([f"{path}:1: cannot read: {exc}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise KBError([f"{path}:{mark.line + 1 if mark else 1}: invalid YAML: {getattr(exc, 'problem', exc)}"]) from None
    if not isinstance(data, dict):
        raise KBError([f"{path}:1: expected a mapping of fields"])
    try:
        model = _schema().model_validate(data)
    except ValidationError as exc:
        lines = line_map(yaml.compose(text, Loader=Loader))
        raise KBError([f"{path}:{line_of(lines, tuple(e['loc']))}: {'.'.join(map(str, e['loc']))}: {e['msg']}"
                       for e in exc.errors()]) from None
    return Text.from_dict({**model.model_dump(), "file": str(path)})


def load_dir(folder: Path) -> tuple[dict[str, Text], list[str]]:
    """The sidecars of a KB folder, by file name (1012-triton-shared-memory.yaml)."""
    from errmap.kb.files import KBError

    texts: dict[str, Text] = {}
    problems: list[str] = []
    for path in sorted((folder / FOLDER).glob("*.y*ml")):
        try:
            texts[path.name] = load_file(path)
        except KBError as exc:
            problems += exc.problems
    return texts, problems


def _fix_texts(fix: tuple) -> list[str]:
    return [getattr(step, "text", step) for step in fix]


def localize(entry, text: Text | None):
    """The entry with its Chinese text in place of the English one (unchanged without a text)."""
    if text is None:
        return entry
    fix = entry.fix
    if len(text.fix) == len(fix):  # a step keeps everything but its text (e.g. the stack it is for)
        fix = tuple(dataclasses.replace(s, text=t) if dataclasses.is_dataclass(s) else t for s, t in zip(fix, text.fix))
    links = entry.links
    if len(text.links) == len(entry.links):
        links = tuple(dataclasses.replace(link, title=t) for link, t in zip(entry.links, text.links))
    checks = entry.checks
    if len(text.says) == len(entry.checks):
        checks = tuple(dataclasses.replace(c, says=s) for c, s in zip(entry.checks, text.says))
    predicts = entry.predicts
    if len(text.predicts) == len(predict_sentences(entry)):
        zh = iter(text.predicts)
        predicts = tuple(dataclasses.replace(p, says=next(zh) if isinstance(p.says, str) else {case: next(zh) for case in p.says})
                         for p in entry.predicts)
    exits = entry.exits
    if len(text.exits) == len(entry.exits):
        exits = tuple(dataclasses.replace(x, says=s) for x, s in zip(entry.exits, text.exits))
    return dataclasses.replace(
        entry, title=text.title, group=text.group, summary=text.summary, cause=text.cause or entry.cause, fix=fix,
        applies_to=text.applies_to if entry.applies_to else None, links=links, checks=checks, predicts=predicts, exits=exits,
    )


def predict_sentences(entry) -> list[str]:
    """The sentences of an entry's predictions in order, as its sidecar's `predicts` translates them."""
    return [s for p in entry.predicts for s in p.sentences]


def for_json(entry, text: Text | None, captures: dict[str, str] | None = None, stack: str | None = None,
             diagnosis: bool = False, gpu: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The Chinese text of a diagnosis or an entry as a JSON field of its own (None without one); a
    diagnosis's steps are those of its run's stack and GPU (its JSON `gpu`), in the order of the English `fix`."""
    if text is None:
        return None
    from errmap.kb import gpus

    zh = localize(entry, text)
    run_gpu = gpus.from_json(gpu)
    steps = [s for _, s in zh.fitting_steps(stack, run_gpu)] if diagnosis else zh.fix
    if diagnosis and run_gpu is not None:
        captures = {**run_gpu.values(), **(captures or {})}
    return {
        "title": zh.title,
        "summary": zh.summary,
        "cause": zh.fill(zh.cause, captures),
        "fix": [zh.fill(s, captures) for s in _fix_texts(steps)],
    }


def _spans(value: str) -> Counter:
    return Counter(CODE_SPAN.findall(value))


def problems(entry, text: Text | None, glossary=None) -> list[str]:
    """Why this entry's Chinese text is incomplete or differs from the English."""
    where = f"{entry.errno}-{entry.slug}"
    if text is None:
        return [f"{where}: no Chinese text (kb/{FOLDER}/{where}.yaml)"]
    out = []
    steps = _fix_texts(entry.fix)
    out += [f"{text.file}: no {name}" for name, missing in (
        ("cause", not text.cause), ("fix", not text.fix), ("applies_to", bool(entry.applies_to) and not text.applies_to),
        ("says", bool(entry.checks) and not text.says), ("predicts", bool(entry.predicts) and not text.predicts),
        ("exits", bool(entry.exits) and not text.exits), ("links", bool(entry.links) and not text.links)) if missing]
    pairs = [("summary", entry.summary, text.summary), ("title", entry.title, text.title)]
    if text.cause:
        pairs.append(("cause", entry.cause, text.cause))
    if text.fix and len(text.fix) != len(steps):
        out.append(f"{text.file}: fix has {len(text.fix)} steps, the English {len(steps)}")
    else:
        pairs += [(f"fix step {i}", en, zh) for i, (en, zh) in enumerate(zip(steps, text.fix), 1)]
    if entry.applies_to and text.applies_to:
        pairs.append(("applies_to", entry.applies_to, text.applies_to))
    if text.says and len(text.says) != len(entry.checks):
        out.append(f"{text.file}: says has {len(text.says)} sentences, the English entry {len(entry.checks)} checks")
    predicted = predict_sentences(entry)
    if text.predicts and len(text.predicts) != len(predicted):
        out.append(f"{text.file}: predicts has {len(text.predicts)} sentences, the English predictions {len(predicted)}")
    elif text.predicts:
        pairs += [(f"predicts {i}", en, zh) for i, (en, zh) in enumerate(zip(predicted, text.predicts), 1)]
    if text.exits and len(text.exits) != len(entry.exits):
        out.append(f"{text.file}: exits has {len(text.exits)} sentences, the English entry {len(entry.exits)} exit causes")
    elif text.exits:
        pairs += [(f"exits {i}", x.says, zh) for i, (x, zh) in enumerate(zip(entry.exits, text.exits), 1)]
    if text.links and len(text.links) != len(entry.links):
        out.append(f"{text.file}: links has {len(text.links)} titles, the English entry {len(entry.links)} links")
    elif text.links:
        pairs += [(f"link {i}", link.title, zh) for i, (link, zh) in enumerate(zip(entry.links, text.links), 1)]
    for field, en, zh in pairs:
        if set(PLACEHOLDER.findall(en)) != set(PLACEHOLDER.findall(zh)):
            out.append(f"{text.file}: {field}: placeholders {sorted(set(PLACEHOLDER.findall(zh)))} differ from the English {sorted(set(PLACEHOLDER.findall(en)))}")
        if _spans(en) != _spans(zh):
            missing = sorted((_spans(en) - _spans(zh)).elements())
            extra = sorted((_spans(zh) - _spans(en)).elements())
            out.append(f"{text.file}: {field}: code spans differ from the English (missing {missing}, extra {extra})")
        if not HAN.search(zh):
            out.append(f"{text.file}: {field}: no Chinese in it")
        if "\ufffd" in zh:
            out.append(f"{text.file}: {field}: garbled text (U+FFFD)")
        if glossary is not None:
            out += [f"{text.file}: {field}: {msg}" for msg in glossary.problems(en, zh)]
    if glossary is not None:
        out += [f"{text.file}: says: {msg}" for zh in text.says for msg in glossary.problems("", zh)]
    twice = sorted({w for w in text.search if text.search.count(w) > 1})
    if twice:
        out.append(f"{text.file}: search: {twice} listed twice")
    return out


@dataclass(frozen=True)
class Term:
    zh: str
    en: str | None = None  # a pattern on the English text: where it occurs, the Chinese uses `zh`
    avoid: tuple[str, ...] = ()  # regular expressions of renderings not to use

    @property
    def pattern(self) -> regex.Pattern[str] | None:
        return regex.compile(self.en, regex.IGNORECASE) if self.en else None


@dataclass(frozen=True)
class Glossary:
    """kb/glossary.yaml: the standard Chinese terms errmap's Chinese text follows."""

    terms: tuple[Term, ...]

    @classmethod
    def load(cls, path: Path) -> Glossary:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return cls(tuple(Term(t["zh"], t.get("en"), tuple(t.get("avoid", ()))) for t in data["terms"]))

    def avoided(self, zh: str) -> list[tuple[str, Term]]:
        """(the words, their term) for each rendering of `zh` the glossary avoids; `code spans` are not read."""
        prose = CODE_SPAN.sub(" ", zh)
        return [(m[0], t) for t in self.terms for bad in t.avoid if (m := regex.search(bad, prose))]

    def problems(self, en: str, zh: str) -> list[str]:
        out = [f"the English says {m[0]!r}: use the glossary's {t.zh!r}"
               for t in self.terms if en and t.pattern and (m := t.pattern.search(en)) and t.zh not in zh]
        return out + [f"{words!r} is not the glossary's term: use {t.zh!r}" for words, t in self.avoided(zh)]
