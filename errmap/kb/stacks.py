"""Which software wrote a log: the stack named by its traceback frames' package paths, its config keys and its
start-up banners. The stacks are KB data (kb/stacks.yaml: their names, precedence, what they build on, frame
packages, banner literals, distributions); this module reads that file once and answers from it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

import regex

from errmap.kb.files import KBError, official_dir, parse, read

T = TypeVar("T")


@dataclass(frozen=True)
class Stack:
    key: str
    name: dict[str, str]  # language -> the name shown
    builds_on: tuple[str, ...] = ()
    frames: tuple[str, ...] = ()  # regex parts of a frame's package folder
    literals: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()


@dataclass(frozen=True)
class Implied:
    """A frame package that names a stack only by what else a log names (HF's Trainer, accelerate)."""
    key: str
    frames: tuple[str, ...]
    means: str
    unless: str | None = None


def _load() -> tuple[list[Stack], list[Implied]]:
    path = official_dir() / "stacks.yaml"
    doc = parse(path, read(path))
    try:
        stacks = [Stack(s["key"], dict(s["name"]), tuple(s.get("builds_on", ())), tuple(s.get("frames", ())),
                        tuple(s.get("literals", ())), tuple(s.get("pip", ()))) for s in doc["stacks"]]
        implied = [Implied(h["key"], tuple(h["frames"]), h["means"], h.get("unless")) for h in doc.get("implies") or ()]
    except (KeyError, TypeError) as exc:
        raise KBError([f"{path}:1: not a list of stacks as its header describes: {exc!r}"]) from None
    return stacks, implied


STACKS, IMPLIED = _load()
# In order of precedence: the keys a KB step or link may name.
ORDER = tuple(s.key for s in STACKS)
# The names shown to people, by key.
NAMES = {s.key: s.name["en"] for s in STACKS}


def name(key: str, lang: str = "en") -> str:
    """A stack's name as people read it in `lang` (its English name where it has none)."""
    stack = next(s for s in STACKS if s.key == key)
    return stack.name.get(lang) or stack.name["en"]


# Stacks built on another whose steps also hold for them.
ALSO = {s.key: s.builds_on for s in STACKS if s.builds_on}
# A frame's path: a package directory (or HF's Trainer module) -> its stack, or a package that implies one
# (resolved by framework()).
FRAME_PACKAGE = regex.compile(
    r"[/\\](?:" + "|".join(f"(?P<{x.key}>{'|'.join(x.frames)})" for x in [*STACKS, *IMPLIED] if x.frames) + r")(?=[/\\]|$)"
)
INSTALLED = regex.compile(r"(?=[/\\](?:site|dist)-packages[/\\])")
# Lines outside tracebacks that name the stack.
LITERALS = {lit.encode(): s.key for s in STACKS for lit in s.literals}


@lru_cache(maxsize=4096)  # a traceback's paths recur in every traceback through them
def in_frame(path: str) -> str | None:
    """The stack of a traceback frame's file path: the innermost of its folders that is a package
    (a checkout's verl/verl/), or the one installed under site-packages (a venv named `verl` is not verl)."""
    path = INSTALLED.split(path)[-1]
    found = [m.lastgroup for m in FRAME_PACKAGE.finditer(path)]
    return found[-1] if found else None


def framework(stacks: set[str] | dict[str, object]) -> str | None:
    """The one stack that wrote a run's logs, from all it named, with the packages that imply one (`implies` in
    kb/stacks.yaml: accelerate frames under HF's Trainer are the Trainer's, accelerate alone is an accelerate run)."""
    named = set(stacks)
    named |= {h.means for h in IMPLIED if h.key in named and h.unless not in named}
    return next((s for s in ORDER if s in named), None)


def fitting(items: Iterable[T], stack: str | None) -> list[T]:
    """Fix steps or links (anything with a `stack` tuple) for a run of `stack`: its own first, then those
    of the stacks it builds on, then the general ones; other stacks' are left out. All, in order, when
    the stack is unknown."""
    items = list(items)
    if stack is None:
        return items
    order = (stack, *ALSO.get(stack, ()))
    return [x for s in order for x in items if s in x.stack and not any(t in x.stack for t in order[:order.index(s)])] + [
        x for x in items if not x.stack]
