"""Predictions: the KB's `predicts:` rules evaluated on what `errmap doctor` read.

A plain prediction is a list of conditions, each a probed fact or a training setting (the user's
override, else verl's default) compared with a constant, another fact or other settings, with the
operators of `checks:` (errmap/verify.py). Rules that are no plain comparison are MECHANISMS here:
the KB names one with its parameters (which keys, which numbers) and the sentence of each case.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from errmap.kb import datasets
from errmap.kb.model import KB, Condition, Entry, Prediction
from errmap.kb.stacks import NAMES
from errmap.probes.base import Fact
from errmap.kb.compare import compare, contains, empty, pick

DEFAULT_NOTE = " (verl default)"  # after a setting the overrides left out
NULLS = ("null", "None", "~", "")  # Hydra's ways to write no value
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


@dataclass
class Warning_:
    errno: int
    says: str
    facts: dict[str, Any] = field(default_factory=dict)
    about: str | None = None  # the file a warning is about
    sentence: int | None = None  # which of its entry's prediction sentences it says (translations.predict_sentences)
    names: dict[str, str] = field(default_factory=dict)  # the values filled into that sentence


class Setup(Protocol):
    """What a prediction reads: `errmap doctor`'s facts and settings."""

    data_facts: dict[str, dict[str, Fact]]
    model: str | None
    model_facts: dict[str, Fact]
    typed: list[str]  # the override keys as typed, without those a `+` adds on purpose
    stack: str | None  # the trainer of the run (kb/stacks.yaml key), when known

    def setting(self, key: str) -> tuple[str | None, bool]: ...

    def fact(self, name: str, captures: dict[str, str], path: str | None) -> Fact | None: ...


# ---------------------------------------------------------------- shown values


def shown(value: Any) -> str:
    """A value in a sentence: list items and mapping keys joined, by `; ` when an item has a comma or a blank."""
    if isinstance(value, dict):
        value = list(value)
    if isinstance(value, (list, tuple)):
        items = [shown(v) for v in value]
        return ("; " if any("," in i or " " in i for i in items) else ", ").join(items)
    text = "none" if value is None else str(value)
    return text if len(text) <= 240 else text[:239] + "…"


def setting(doc: Setup, key: str) -> tuple[str | None, str]:
    """(value, as shown): the override, else verl's default marked as such."""
    value, given = doc.setting(key)
    if value is not None and str(value).strip() in NULLS:
        value = None
    return value, shown(value) + ("" if given else DEFAULT_NOTE)


def _major(x: Any) -> Any:
    if isinstance(x, list):
        return [_major(v) for v in x]
    head = str(x).strip().split(".")[0] if x is not None else ""
    return int(head) if head.isdigit() else None


def _number(x: Any) -> int | None:
    return int(x) if x is not None and str(x).strip().isdigit() else None


# ---------------------------------------------------------------- conditions


@dataclass
class Held:
    """A condition that holds: what it binds for the sentence and the facts it read."""

    names: dict[str, str]
    facts: list[tuple[str, dict[str, str]]]  # (fact, the captures it was read with)


def _target(doc: Setup, c: Condition, path: str | None) -> tuple[bool, Any, str]:
    """(known, target, as shown); known is False when a fact or setting it needs is unknown."""
    if c.against:
        f = doc.fact(c.against, {}, path)
        if f is None or not f.known:
            return False, None, ""
        value = pick(f.value, c.against_field)
        return True, value, shown(value)
    if c.against_setting is not None:
        keys = [c.against_setting] if isinstance(c.against_setting, str) else c.against_setting
        values = [setting(doc, k) for k in keys]
        if c.op in ("missing", "present"):
            items = [v for v, _ in values] + (c.value if isinstance(c.value, list) else [] if c.value is None else [c.value])
            return None not in items, items, shown(items)
        if isinstance(c.against_setting, str):
            return values[0][0] is not None, values[0][0], values[0][1]
        numbers = [_number(v) for v, _ in values]
        if None in numbers:
            return False, None, ""
        return True, sum(numbers), str(sum(numbers))
    return True, c.value, shown(c.value)


def holds(doc: Setup, c: Condition, path: str | None = None) -> Held | None:
    """The condition on this setup (a data file's facts for data.*); None when it does not hold or
    cannot be told (an unknown fact never gives a warning)."""
    read: list[tuple[str, dict[str, str]]] = []
    if c.setting is not None:
        subject, subject_shown = setting(doc, c.setting)
    else:
        f = doc.fact(c.fact, c.captures, path)
        if f is None or not f.known:
            return None
        read.append((c.fact, c.captures))
        subject = pick(f.value, c.field)
        subject_shown = shown(subject)
    has_target = c.value is not None or c.against is not None or c.against_setting is not None
    known, target, target_shown = _target(doc, c, path) if has_target else (True, None, "")
    if not known:
        return None
    if c.against:
        read.append((c.against, {}))
    if c.part == "major":
        subject, target = _major(subject), _major(target)
    op = c.op
    if op in ("missing", "present") and has_target:
        if subject is None:
            return None
        items = target if isinstance(target, list) else [target]
        absent = [t for t in items if not contains(subject, t)]
        if op == "missing" and not absent or op == "present" and absent:
            return None
        if op == "missing":
            subject_shown = ", ".join(repr(a) for a in absent)
    elif op in ("missing", "present"):
        if empty(subject) != (op == "missing"):
            return None
    elif op == "contains":
        if subject is None or not contains(subject, target):
            return None
    elif op == "in":
        if subject is None or str(subject).lower() not in [str(v).lower() for v in target]:
            return None
    elif isinstance(subject, list):
        hits = [v for v in subject if compare(v, op, target)]
        if not hits:
            return None
        subject_shown = shown(hits)
    elif not compare(subject, op, target):
        return None
    names = {c.name: subject_shown} if c.name else {}
    if c.target_name:
        names[c.target_name] = target_shown
    return Held(names, read)


def _fill(text: str, names: dict[str, str]) -> str:
    from errmap.kb.model import PLACEHOLDER

    return PLACEHOLDER.sub(lambda m: names.get(m[1], m[0]), text)


# ---------------------------------------------------------------- mechanisms


@dataclass(frozen=True)
class Mechanism:
    """A rule that is no plain comparison: fn(setup, params) yields (case, names) per warning."""

    fn: Callable[..., Iterator[tuple[str, dict[str, str]]]]
    params: dict[str, str]  # the parameters the KB gives it: name -> "setting" (a verl key), "number" or "list"
    cases: tuple[str, ...]  # the cases it says something for
    names: tuple[str, ...]  # the {names} its sentences may use
    per_file: bool = False  # said of each data file: fn(setup, params, path)

    @property
    def settings(self) -> list[str]:
        return [k for k, kind in self.params.items() if kind == "setting"]


def verl_batch(doc: Setup, p: dict[str, Any]) -> Iterator[tuple[str, dict[str, str]]]:
    """verl's batch divisibility for FSDP actors: validate_config in verl/utils/config.py,
    ActorConfig.validate, and the per-GPU normalization of the actor worker."""
    strategy, _ = setting(doc, p["strategy"])
    if strategy not in p["strategies"]:
        return  # megatron divides by its data-parallel size: not predicted
    values = {k: setting(doc, p[k]) for k in ("train", "mini", "n", "gpus_per_node", "nodes", "sp", "micro")}
    num = {k: _number(v) for k, (v, _) in values.items()}
    names = {k: s for k, (_, s) in values.items()}
    train, mini, n, per_node, nodes, sp, micro = (num[k] for k in ("train", "mini", "n", "gpus_per_node", "nodes", "sp", "micro"))
    if None in (train, mini, n, per_node, nodes, sp) or not per_node * nodes or not sp:
        return
    gpus = per_node * nodes
    ranks = gpus // sp
    per_gpu = mini * n // ranks if gpus >= sp else 0
    names.update(real=str(train * n), gpus=str(gpus), ranks=str(ranks), per_gpu=str(per_gpu))
    if train * n % gpus:
        yield "indivisible", names
    if train < mini:
        yield "below_mini", names
    if per_gpu <= 0:
        yield "no_rows_per_gpu", names
    elif micro and per_gpu % micro:
        yield "micro_indivisible", names


@cache
def verl_keys() -> tuple[list[str], set[str], str]:
    """(every key of verl's PPO trainer config, the mappings under which any key goes, the verl
    version the list is of): a mapping written `{}` there, or one verl hands on as-is (override_*, *_kwargs)."""
    import re

    text = (Path(__file__).resolve().parent.parent / "probes" / "verl_keys.txt").read_text()
    lines = [x for x in text.splitlines() if x and not x.startswith("#")]
    version = re.search(r"verl (\S+) \(commit", text)
    known = [x for x in lines if not x.endswith(".*")]
    free = {x[:-2] for x in lines if x.endswith(".*")}
    free |= {".".join(k.split(".")[: i + 1]) for k in lines for i, part in enumerate(k.split("."))
             if part.startswith("override_") or part.endswith("kwargs")}
    return known, free, version[1] if version else "unknown"


DEFAULTS_FILE = "verl-defaults.yaml"  # in kb/: verl's defaults of the settings predictions read


def read_defaults(path: Path) -> tuple[dict[str, str], list[str]]:
    """(setting -> verl's default, as an override writes it; problems as file:line)."""
    import yaml

    from errmap.kb.files import line_map, Loader

    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=Loader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return {}, [f"{path}:1: cannot read: {exc}"]
    defaults = data.get("defaults") if isinstance(data, dict) else None
    if not isinstance(defaults, dict):
        return {}, [f"{path}:1: expected `defaults:`, a mapping of setting to value"]
    lines = line_map(yaml.compose(text, Loader=Loader))
    out, problems = {}, []
    for key, value in defaults.items():
        where = f"{path}:{lines.get(('defaults', key), 1)}"
        if not isinstance(key, str) or not is_verl_key(key):
            problems.append(f"{where}: {key!r} is not a key of verl's PPO trainer config")
        elif isinstance(value, (dict, list)):
            problems.append(f"{where}: {key}: a default is one value")
        else:
            out[key] = str(value)
    return out, problems


@cache
def verl_defaults() -> dict[str, str]:
    from errmap.kb.files import official_dir

    return read_defaults(official_dir() / DEFAULTS_FILE)[0]


def is_verl_key(key: str) -> bool:
    known, free, _ = verl_keys()
    parts = key.split(".")
    return key in known or any(".".join(parts[:i]) in free for i in range(1, len(parts)))


def misspelt_key(doc: Setup, p: dict[str, Any]) -> Iterator[tuple[str, dict[str, str]]]:
    """An override key verl's config does not have, when a key it has is that key misspelt."""
    known, _, version = verl_keys()
    for key in doc.typed:
        if is_verl_key(key):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=float(p["cutoff"]))
        if close:
            yield "did_you_mean", {"key": key, "close": close[0], "version": version}


def trainer_file_type(doc: Setup, p: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A data file of a type the run's trainer does not load (kb/datasets.yaml)."""
    if doc.stack and (types := datasets.unloadable(doc.stack, path)) is not None:
        yield "not_loaded", {"file": path, "stack": NAMES.get(doc.stack, doc.stack), "types": shown(list(types))}


def trainer_columns(doc: Setup, p: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A data file whose columns fit none of the run's trainer's dataset formats (kb/datasets.yaml); LLaMA-Factory's by
    the dataset_info.json beside it."""
    columns = doc.fact("data.columns", {}, path) if doc.stack in datasets.rules() else None
    if columns is None or not columns.known:
        return
    info = doc.fact("data.dataset_info", {}, path) if doc.stack == "llamafactory" else None
    needs = datasets.unfit(doc.stack, set(columns.value), lambda key: setting(doc, key)[0],
                           info.value if info is not None and info.known else None)
    if needs:
        formats = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in needs)
        yield "no_format", {"file": path, "stack": NAMES.get(doc.stack, doc.stack), "columns": shown(columns.value),
                            "formats": formats}


def trainer_chat_column(doc: Setup, p: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A prompt column of plain text for a trainer that reads chat messages (kb/datasets.yaml `chat`: verl's)."""
    fmt = doc.fact("data.prompt_format", {}, path) if doc.stack and datasets.wants_chat(doc.stack) else None
    if fmt is not None and fmt.known and fmt.value.get("present") and not fmt.value.get("chat"):
        yield "not_chat", {"file": path, "column": str(fmt.value["column"]), "type": str(fmt.value.get("type"))}


_BATCH_KEYS = ("strategy", "train", "mini", "n", "gpus_per_node", "nodes", "sp", "micro")
MECHANISMS = {
    "verl_batch": Mechanism(verl_batch, {**dict.fromkeys(_BATCH_KEYS, "setting"), "strategies": "list"},
                            ("indivisible", "below_mini", "no_rows_per_gpu", "micro_indivisible"),
                            (*_BATCH_KEYS, "real", "gpus", "ranks", "per_gpu")),
    "misspelt_key": Mechanism(misspelt_key, {"cutoff": "number"}, ("did_you_mean",), ("key", "close", "version")),
    "trainer_file_type": Mechanism(trainer_file_type, {}, ("not_loaded",), ("file", "stack", "types"), per_file=True),
    "trainer_columns": Mechanism(trainer_columns, {}, ("no_format",), ("file", "stack", "columns", "formats"), per_file=True),
    "trainer_chat_column": Mechanism(trainer_chat_column, {}, ("not_chat",), ("file", "column", "type"), per_file=True),
}


# ---------------------------------------------------------------- predicting


def scope(p: Prediction) -> str:
    """Where a prediction looks: each data file (a data.* fact, a mechanism per file), the model (model.*) or the
    machine."""
    if p.mechanism in MECHANISMS and MECHANISMS[p.mechanism].per_file:
        return "data"
    facts = [n for c in p.when for n in (c.fact, c.against) if n]
    if any(n.startswith("data.") for n in facts):
        return "data"
    if any(n.startswith("model.") for n in facts):
        return "model"
    return "machine"


def _attach(doc: Setup, names: list[str], read: list[tuple[str, dict[str, str]]], path: str | None) -> dict[str, Any]:
    """The facts a warning shows, read as its conditions read them (with their captures)."""
    how = {n: caps for n, caps in reversed(read)}
    out = {}
    for n in dict.fromkeys(names):
        f = doc.fact(n, how.get(n, {}), path)
        if f is not None:
            out[n] = f.to_json()
    return out


def _one(doc: Setup, e: Entry, p: Prediction, path: str | None) -> list[Warning_]:
    about = path if path is not None else doc.model if scope(p) == "model" else None
    first = sum(len(q.sentences) for q in e.predicts[: e.predicts.index(p)])
    if p.mechanism:
        m = MECHANISMS[p.mechanism]
        return [Warning_(e.errno, _fill(p.says[case], names), _attach(doc, list(p.show), [], path), about,
                         sentence=first + list(p.says).index(case), names=names)
                for case, names in (m.fn(doc, p.params, path) if m.per_file else m.fn(doc, p.params))]
    names = {"file": path or "", "model": doc.model or ""}
    read: list[tuple[str, dict[str, str]]] = []
    for c in p.when:  # in order: a later condition's fact is read only when the earlier ones hold
        held = holds(doc, c, path)
        if held is None:
            return []
        names.update(held.names)
        read += held.facts
    return [Warning_(e.errno, _fill(p.says, names), _attach(doc, list(p.show) or [n for n, _ in read], read, path), about,
                     first, names)]


def says_in(w: Warning_, entry: Entry | None) -> str:
    """What a warning says in the language of `entry` (its entry as KB.localized gives it): that
    language's sentence with the same values, a verl default marked in that language too."""
    from errmap.report.i18n import _

    sentences = [s for p in entry.predicts for s in p.sentences] if entry is not None else []
    if w.sentence is None or w.sentence >= len(sentences):
        return w.says
    return _fill(sentences[w.sentence], {k: v.replace(DEFAULT_NOTE, _(DEFAULT_NOTE)) for k, v in w.names.items()})


def predict(doc: Setup, kb: KB) -> list[Warning_]:
    """Every warning the KB predicts for this setup: the machine's and the settings' first, then
    each data file's, then the model's; of an entry's plain predictions the first that holds."""
    out: list[Warning_] = []
    subjects = [("machine", None), *(("data", p) for p in doc.data_facts), *([("model", None)] if doc.model_facts else [])]
    for where, path in subjects:
        for e in kb:
            plain_done = False
            for p in e.predicts:
                if scope(p) != where or (plain_done and not p.mechanism):
                    continue
                found = _one(doc, e, p, path)
                plain_done = plain_done or bool(found) and not p.mechanism
                out += found
    return out
