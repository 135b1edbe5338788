"""kb/datasets.yaml: each trainer's own rules for its training data (the file types it loads, its dataset formats and
the columns each needs), and which of them a data file breaks. `errmap doctor` reads them through predict.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

FILE = "datasets.yaml"


@dataclass(frozen=True)
class Format:
    name: str
    columns: dict[str, str]  # role -> the column's default name
    settings: dict[str, str]  # role -> the setting that renames its column
    chat: tuple[str, ...] = ()  # roles whose column holds a list of {role, content} messages


@dataclass(frozen=True)
class Rules:
    stack: str
    files: tuple[str, ...]  # the file name endings the trainer loads
    formats: tuple[Format, ...]


@cache
def rules() -> dict[str, Rules]:
    """Every stack's rules, by its key (kb/stacks.yaml)."""
    import yaml

    from errmap.kb.files import official_dir

    data = yaml.safe_load((official_dir() / FILE).read_text(encoding="utf-8"))
    return {stack: Rules(stack, tuple(r["files"]), tuple(Format(f["name"], dict(f["columns"]), dict(f.get("settings", {})),
                                                                tuple(f.get("chat", ())))
                                                         for f in r["formats"]))
            for stack, r in data.items()}


def wants_chat(stack: str) -> bool:
    """Whether the stack's trainer reads its prompts as chat messages (a format with `chat` roles)."""
    r = rules().get(stack)
    return r is not None and any(f.chat for f in r.formats)


def unloadable(stack: str, path: str) -> tuple[str, ...] | None:
    """The file types the stack's trainer loads, when `path` is none of them; None when it is (or no rules)."""
    r = rules().get(stack)
    if r is None or Path(path).name.lower().endswith(r.files):
        return None
    return r.files


def unfit(stack: str, columns: set[str], setting: Callable[[str], str | None],
          info: dict | None = None) -> list[tuple[str, list[str]]] | None:
    """The stack's formats with the columns each needs, when the file's `columns` fit none of them; None when one fits
    (or the stack has no rules). `setting(key)`: a setting as the run gives it. `info`: LLaMA-Factory's dataset_info.json
    entry of the file (its `formatting` and `columns`, which rename the defaults)."""
    r = rules().get(stack)
    if r is None:
        return None
    renamed = (info or {}).get("columns") or {}
    formatting = (info or {}).get("formatting", "alpaca") if info is not None else None
    needs = []
    for f in r.formats:
        if formatting is not None and not f.name.startswith(formatting):
            continue
        cols = [renamed.get(role) or (f.settings.get(role) and setting(f.settings[role])) or col for role, col in f.columns.items()]
        if set(cols) <= columns:
            return None
        needs.append((f.name, cols))
    return needs
