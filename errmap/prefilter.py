"""Stage one of matching: find every anchor literal in a block of bytes in one pass.

Hyperscan (a regular dependency where it has wheels: Linux and macOS on x86_64) is used when it
imports (several times faster, identical hits); Aho-Corasick (ahocorasick-rs) is the pure fallback
elsewhere. ERRMAP_PREFILTER=ahocorasick or =hyperscan picks one explicitly. Both report (literal index, end offset): the end is enough to find
the line around a hit, since no literal holds a line break.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


class AhoCorasick:
    name = "ahocorasick"

    def __init__(self, literals: list[bytes]):
        import ahocorasick_rs

        self._ac = ahocorasick_rs.BytesAhoCorasick(literals)

    def hits(self, block: bytes) -> Iterable[tuple[int, int]]:
        return ((i, end) for i, _, end in self._ac.find_matches_as_indexes(block, overlapping=True))


class Hyperscan:
    name = "hyperscan"

    def __init__(self, literals: list[bytes]):
        import hyperscan

        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(expressions=literals, ids=list(range(len(literals))), elements=len(literals), flags=0, literal=True)

    def hits(self, block: bytes) -> Iterable[tuple[int, int]]:
        found: list[tuple[int, int]] = []

        def on_match(i: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            found.append((i, end))

        self._db.scan(block, match_event_handler=on_match)  # the handler is bound to a name: kept alive
        return found


def build(literals: list[bytes]) -> AhoCorasick | Hyperscan:
    choice = os.environ.get("ERRMAP_PREFILTER", "auto")
    if choice in ("auto", "hyperscan"):
        try:
            return Hyperscan(literals)
        except ImportError:
            if choice == "hyperscan":
                raise
    return AhoCorasick(literals)


def engine() -> str:
    """The name of the engine `build` picks here, without building it (for `errmap --version`)."""
    choice = os.environ.get("ERRMAP_PREFILTER", "auto")
    if choice == "ahocorasick":
        return AhoCorasick.name
    from importlib.util import find_spec

    return Hyperscan.name if find_spec("hyperscan") is not None else AhoCorasick.name
