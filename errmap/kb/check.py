"""`errmap kb check`: every problem in the knowledge base, as a readable list."""

from __future__ import annotations

import os
import time
from pathlib import Path

from errmap.kb import files as kbfiles
from errmap.kb import gpus, predict, translations
from errmap.kb import load as kbmod
from errmap.kb import model as kbmodel

GLOSSARY = "glossary.yaml"  # kb/glossary.yaml: the standard Chinese terms

# Inputs that make a backtracking pattern blow up: long runs of what \w, \d, \s and . all eat, and
# runs of each character the pattern itself names (`(b|b)+c` blows up only on b's).
_ADVERSARIAL = ["a", "1", " ", "a ", "'", ":"]
_META = set("\\()[]{}?*+|^$.")
SIZE = 5000  # characters of filler in a test line
CHECK_TIMEOUT = 1.0  # seconds: an exponential pattern exceeds any bound, a linear one is far below
SLOW_CPU = 0.02  # CPU seconds on one test line above which growth is measured


def _fillers(anchor: kbmodel.Anchor) -> list[str]:
    own = {c for c in anchor.regex + (anchor.unless or "") if c.isprintable() and c not in _META}
    return [*_ADVERSARIAL, *sorted(own - set(_ADVERSARIAL))]


def _cost(patterns: list, line: str) -> float | None:
    """CPU seconds the patterns take on a line (None: timed out). CPU time, not wall time, so a
    loaded machine does not make a pattern look slow."""
    t0 = time.process_time()
    try:
        for p in patterns:
            p.search(line, timeout=CHECK_TIMEOUT)
    except TimeoutError:
        return None
    return time.process_time() - t0


def _least(patterns: list, line: str, runs: int = 3) -> float | None:
    """The least CPU time of a few runs (None: one timed out)."""
    costs = [_cost(patterns, line) for _ in range(runs)]
    return None if None in costs else min(costs)


def slow_anchors(entry: kbmodel.Entry) -> list[str]:
    """Anchors whose pattern (or guard) backtracks catastrophically or grows faster than linearly
    on lines built around their literals: timed out on one line, or costing more than SLOW_CPU and
    over 8 times as much on a line 4 times as long (linear is 4, quadratic 16)."""
    problems = []
    for i, anchor in enumerate(entry.anchors):
        patterns = [anchor.compiled] + ([anchor.guard] if anchor.guard is not None else [])
        where = f"{entry.errno}-{entry.slug}: anchor {i + 1}"
        for lit in anchor.literals:
            found = None
            for unit in _fillers(anchor):
                filler = unit * (SIZE // len(unit))
                cost = _cost(patterns, lit + filler + lit + filler)
                if cost is None:
                    found = f"{where} backtracks catastrophically (over {CHECK_TIMEOUT}s on one line of {unit!r} runs)"
                elif cost > SLOW_CPU:
                    # growth judged on the fastest of a few runs each, so a busy machine's noise cannot fake it
                    short = filler[: len(filler) // 4]
                    small = _least(patterns, lit + short + lit + short)
                    cost = _least(patterns, lit + filler + lit + filler)
                    if small is not None and cost is not None and cost > 8 * max(small, 1e-6):
                        found = f"{where} is slow on adversarial input (time grows faster than the line on {unit!r} runs)"
                if found:
                    problems.append(found)
                    break
            if found:
                break
    return problems


def check(user_dirs: list[Path]) -> list[str]:
    """Every problem of the official KB and the user folders (`--kb`, then ERRMAP_KB_PATH, as `load` reads them)."""
    env = [Path(p) for p in os.environ.get("ERRMAP_KB_PATH", "").split(os.pathsep) if p]
    folders = [(kbfiles.official_dir(), kbmodel.OFFICIAL_RANGE), *((d, kbmodel.USER_RANGE) for d in [*user_dirs, *env])]
    entries: dict[int, kbmodel.Entry] = {}
    files: dict[int, Path] = {}
    zh: dict[int, translations.Text] = {}
    problems: list[str] = []
    for folder, allowed in folders:
        if not folder.is_dir():
            problems.append(f"{folder}: not a folder")
            continue
        where: dict[int, Path] = {}
        found, bad = kbmod.load_dir(folder, allowed, where)
        problems += bad + kbmod.merge(entries, files, found, where)
        zh.update({n: t for n, t in kbmod.load_translations(folder, found, problems).items() if files[n] == where[n]})
    problems += kbmod.cross_check(entries)
    problems += predict.read_defaults(kbfiles.official_dir() / predict.DEFAULTS_FILE)[1]
    problems += gpu_table_problems(kbfiles.official_dir() / gpus.TABLE)
    glossary = translations.Glossary.load(kbfiles.official_dir() / GLOSSARY)
    for entry in entries.values():
        problems += slow_anchors(entry)
        if entry.errno in kbmodel.OFFICIAL_RANGE or entry.errno in zh:  # a user entry may stay English-only
            problems += translations.problems(entry, zh.get(entry.errno), glossary)
    return problems


def gpu_table_problems(path: Path) -> list[str]:
    """kb/gpus.yaml against errmap.kb.schema.GpuTable, each problem as file:line."""
    from pydantic import ValidationError

    from errmap.kb.schema import GpuTable

    try:
        text = kbfiles.read(path)
        GpuTable.model_validate(kbfiles.parse(path, text))
    except kbfiles.KBError as exc:
        return exc.problems
    except ValidationError as exc:
        import yaml

        lines = kbfiles.line_map(yaml.compose(text, Loader=kbfiles.Loader))
        return [f"{path}:{kbfiles.line_of(lines, tuple(e['loc']))}: {'.'.join(map(str, e['loc'])) or 'table'}: {e['msg']}"
                for e in exc.errors()]
    return []
