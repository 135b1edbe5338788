"""Reading a KB file: its text (bounded, UTF-8), its YAML (safe loader, no aliases) and the line of each
key, so every problem names file:line. Used by load, translations, gpus, predict and stacks."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml


class KBError(Exception):
    """Problems found while loading: each a 'file:line: message' string."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def line_map(node: yaml.Node, path: tuple = ()) -> dict[tuple, int]:
    """Map each key path in a composed YAML document to its 1-based line."""
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            lines.update(line_map(v, path + (k.value,)))
            lines[path + (k.value,)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines.update(line_map(v, path + (i,)))
    return lines


def line_of(lines: dict[tuple, int], loc: tuple) -> int:
    while loc not in lines and loc:
        loc = loc[:-1]
    return lines.get(loc, 1)


Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when the wheel has it: 10x faster


MAX_FILE = 1 << 20  # bytes of one KB file (the largest shipped is ~15 KB)


def read(path: Path) -> str:
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


def parse(path: Path, text: str) -> Any:
    """The YAML document, refusing aliases: `*name` can expand exponentially (billion laughs) or
    refer to itself, and an entry has nothing to share."""
    try:
        for event in yaml.parse(text, Loader=Loader):
            if isinstance(event, yaml.AliasEvent):
                raise KBError([f"{path}:{event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed in a KB file; "
                               "write the value out"])
        return yaml.load(text, Loader=Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise KBError([f"{path}:{line}: invalid YAML: {getattr(exc, 'problem', exc)}"]) from None


def official_dir() -> Path:
    """kb/ beside the package in a checkout, else the copy installed inside the package."""
    here = Path(__file__).resolve().parent.parent  # the errmap package
    for cand in (here.parent / "kb", here / "_kb"):
        if cand.is_dir():
            return cand
    raise KBError([f"{here}: the knowledge base folder kb/ is missing from this installation"])
