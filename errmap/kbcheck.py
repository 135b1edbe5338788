"""`errmap kb check`: every problem in the knowledge base, as a readable list."""

from __future__ import annotations

import time
from pathlib import Path

from errmap import kb as kbmod
from errmap import translations
from errmap.matcher import REGEX_TIMEOUT

GLOSSARY = "glossary.yaml"  # kb/glossary.yaml: the standard Chinese terms
# Inputs that make a backtracking pattern blow up: long runs of what \w, \d, \s and . all eat.
_ADVERSARIAL = ["a" * 5000, "1" * 5000, " " * 5000, "a " * 2500, "'" * 5000, ":" * 5000]


def slow_anchors(entry: kbmod.Entry) -> list[str]:
    """Anchors whose pattern takes too long on adversarial lines built around their literals."""
    problems = []
    for i, anchor in enumerate(entry.anchors):
        for lit in anchor.literals:
            for filler in _ADVERSARIAL:
                line = lit + filler + lit + filler
                t0 = time.perf_counter()
                try:
                    anchor.compiled.search(line, timeout=REGEX_TIMEOUT)
                    if anchor.guard is not None:
                        anchor.guard.search(line, timeout=REGEX_TIMEOUT)
                except TimeoutError:
                    problems.append(f"{entry.errno}-{entry.slug}: anchor {i + 1} backtracks catastrophically (over {REGEX_TIMEOUT}s on one line)")
                    break
                if time.perf_counter() - t0 > 0.05:
                    problems.append(f"{entry.errno}-{entry.slug}: anchor {i + 1} is slow on adversarial input")
                    break
    return problems


def check(user_dirs: list[Path]) -> list[str]:
    folders = [(kbmod.official_dir(), kbmod.OFFICIAL_RANGE), *((d, kbmod.USER_RANGE) for d in user_dirs)]
    entries: dict[int, kbmod.Entry] = {}
    zh: dict[int, translations.Text] = {}
    problems: list[str] = []
    for folder, allowed in folders:
        if not folder.is_dir():
            problems.append(f"{folder}: not a folder")
            continue
        found, bad = kbmod._load_dir(folder, allowed)
        problems += bad
        for errno in found.keys() & entries.keys():
            problems.append(f"{folder}: errno {errno} defined twice")
        entries.update(found)
        zh.update(kbmod._translations(folder, found, problems))
    problems += kbmod.cross_check(entries)
    glossary = translations.Glossary.load(kbmod.official_dir() / GLOSSARY)
    for entry in entries.values():
        problems += slow_anchors(entry)
        if entry.errno in kbmod.OFFICIAL_RANGE or entry.errno in zh:  # a user entry may stay English-only
            problems += translations.problems(entry, zh.get(entry.errno), glossary)
    return problems
