"""What a scan yields, line by line: an anchor's match, a failure no anchor explains, a stack, a release or a
GPU named. The scanner makes them, triage groups them into incidents."""

from __future__ import annotations

from dataclasses import dataclass

from errmap.kb.model import Anchor, Entry
from errmap.scan.lines import Line


@dataclass(slots=True)
class Match:
    """An anchor of a KB entry matched one line (as printed, cut or case-folded: `exact`), or the words of its family
    did (no anchor: `likely`)."""

    entry: Entry
    anchor: Anchor | None
    line: Line
    captures: dict[str, str]
    words: tuple[str, ...] = ()  # a likely match: the hint's words found

    @property
    def confidence(self) -> str:
        return "exact" if self.anchor is not None else "likely"


@dataclass(slots=True)
class Unrecognized:
    """A line that reads like a failure but no anchor knows."""

    line: Line
    type: str
    message: str
    inner: str | None = None  # a wrapper's wrapped type: RayTaskError(KeyError) -> KeyError
    weak: bool = False  # a weak shape (failures.py): failure evidence only where nothing stronger is


@dataclass(slots=True)
class Named:
    """The first line of a source that names the stack which wrote it (stack.py)."""

    line: Line
    stack: str


@dataclass(slots=True)
class Release:
    """A line of a source that names the release of a package the run uses (versions.py); the first for each."""

    line: Line
    package: str
    version: str


@dataclass(slots=True)
class GpuNamed:
    """The first line of a source that names a GPU (gpus.py)."""

    line: Line
    name: str


Event = Match | Unrecognized | Named | GpuNamed | Release
