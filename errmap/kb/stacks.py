"""Which software wrote a log: the stack named by its traceback frames' package paths, verl's config
keys and vLLM's start-up banner. A log names several (verl runs vLLM and torch): the trainer wins,
then its launcher, then the serving engine, then PyTorch itself."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import TypeVar

import regex

T = TypeVar("T")

# In order of precedence; the names are errmap.kb.STACKS's keys.
ORDER = ("verl", "openrlhf", "llamafactory", "trl", "deepspeed", "serving", "pytorch")
# Stacks built on another whose steps also hold for them (TRL and LLaMA-Factory train with HF's Trainer).
ALSO = {"trl": ("pytorch",), "llamafactory": ("pytorch",), "deepspeed": ("pytorch",)}
# A frame's path: a package directory (or HF's Trainer module) -> its stack. `accelerate` and `trainer` (HF's
# Trainer) are resolved by framework(): HF's Trainer runs every step through accelerate.
FRAME_PACKAGE = regex.compile(
    r"[/\\](?:(?P<verl>verl)|(?P<openrlhf>openrlhf)|(?P<llamafactory>llamafactory)|(?P<trl>trl)|(?P<deepspeed>deepspeed)"
    r"|(?P<accelerate>accelerate)|(?P<serving>vllm|sglang)|(?P<trainer>transformers[/\\]trainer\.py)|(?P<pytorch>torch))(?=[/\\]|$)"
)
INSTALLED = regex.compile(r"(?=[/\\](?:site|dist)-packages[/\\])")
# Lines outside tracebacks that name the stack: verl's config keys (its config dump and Hydra overrides),
# vLLM's server banner ("vLLM API server version 0.10.2", vllm/entrypoints/openai/api_server.py).
LITERALS = {b"actor_rollout_ref.": "verl", b"vLLM API server version": "serving"}


@lru_cache(maxsize=4096)  # a traceback's paths recur in every traceback through them
def in_frame(path: str) -> str | None:
    """The stack of a traceback frame's file path: the innermost of its folders that is a package
    (a checkout's verl/verl/), or the one installed under site-packages (a venv named `verl` is not verl)."""
    path = INSTALLED.split(path)[-1]
    found = [m.lastgroup for m in FRAME_PACKAGE.finditer(path)]
    return found[-1] if found else None


def framework(stacks: set[str] | dict[str, object]) -> str | None:
    """The one stack that wrote a run's logs, from all it named: accelerate frames under HF's Trainer are the
    Trainer's (a PyTorch / HF Trainer run), accelerate alone is an accelerate run."""
    named = set(stacks)
    if "accelerate" in named:
        named.add("pytorch" if "trainer" in named else "deepspeed")
    if "trainer" in named:
        named.add("pytorch")
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
