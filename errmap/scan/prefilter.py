"""Stage one of matching: find every anchor literal in a block of bytes in one pass.

Hyperscan (a regular dependency where it has wheels: Linux and macOS on x86_64) is used when it
imports (several times faster, identical hits), and then also runs the anchors' supersets over the lines
that hold a literal (matcher.py); Aho-Corasick (ahocorasick-rs) is the pure fallback elsewhere.
ERRMAP_PREFILTER picks one explicitly: =hyperscan (both stages), =hyperscan-literals (literals only),
=ahocorasick, or =none (Python's substring search, the reference the others are tested against). Both report (literal index, end offset): the end is enough to find
the line around a hit, since no literal holds a line break.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable


class AhoCorasick:
    name = "ahocorasick"

    def __init__(self, literals: list[bytes]):
        import ahocorasick_rs

        self._ac = ahocorasick_rs.BytesAhoCorasick(literals)

    def hits(self, block: bytes) -> Iterable[tuple[int, int]]:
        return ((i, end) for i, _, end in self._ac.find_matches_as_indexes(block, overlapping=True))


class Substrings:
    """No automaton: every literal looked for with `bytes.find` (the reference the engines are tested against)."""

    name = "none"

    def __init__(self, literals: list[bytes]):
        self._literals = literals

    def hits(self, block: bytes) -> Iterable[tuple[int, int]]:
        block, found = bytes(block), []
        for i, lit in enumerate(self._literals):
            at = block.find(lit)
            while at >= 0:
                found.append((at + len(lit), i))
                at = block.find(lit, at + 1)
        return [(i, end) for end, i in sorted(found)]


class Hyperscan:
    name = "hyperscan"

    def __init__(self, literals: list[bytes], literal: bool = True, once: frozenset[int] = frozenset()):
        """`literals` are plain strings, or Hyperscan patterns where `literal` is False; those at the indexes in
        `once` are reported at their first end in each block only."""
        import hyperscan

        flags = [hyperscan.HS_FLAG_SINGLEMATCH if i in once else 0 for i in range(len(literals))]
        key = [b"regex" if not literal else b"literal", repr(sorted(once)).encode(), *literals]
        self._db = _cached(key)
        if self._db is None:
            self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            try:
                self._db.compile(expressions=literals, ids=list(range(len(literals))), elements=len(literals),
                                 flags=flags, literal=literal)
            except hyperscan.HyperscanError as exc:
                raise HyperscanError(str(exc)) from None
            _store(key, self._db)

    def hits(self, block: bytes) -> Iterable[tuple[int, int]]:
        found: list[tuple[int, int]] = []

        def on_match(i: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            found.append((i, end))

        self._db.scan(block, match_event_handler=on_match)  # the handler is bound to a name: kept alive
        return found


def _db_key(literals: list[bytes]) -> str:
    """The key of the compiled database of exactly these literals (so of one KB's content), for this hyperscan."""
    import hyperscan

    h = hashlib.sha256(hyperscan.__version__.encode())  # a database is tied to the library that built it
    for lit in literals:
        h.update(len(lit).to_bytes(4, "little") + lit)
    return h.hexdigest()


def _cached(literals: list[bytes]):
    import hyperscan

    from errmap.kb import cache

    try:
        db = hyperscan.loadb(cache.read("hs", _db_key(literals), ".db") or b"", hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)  # a loaded database comes without one
        return db
    except hyperscan.HyperscanError:
        return None


def _store(literals: list[bytes], db) -> None:
    import hyperscan

    from errmap.kb import cache

    cache.write("hs", _db_key(literals), hyperscan.dumpb(db), ".db")  # a read-only home: compile each time


class HyperscanError(Exception):
    """Hyperscan refused a pattern."""


def compiles(pattern: bytes) -> bool:
    """Whether Hyperscan takes this pattern (False where it is not installed)."""
    try:
        import hyperscan

        hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(expressions=[pattern], ids=[0], elements=1, flags=0)
    except ImportError:
        return False
    except hyperscan.HyperscanError:
        return False
    return True


def choice() -> str:
    return os.environ.get("ERRMAP_PREFILTER", "auto")


def patterns_wanted() -> bool:
    """Whether stage one runs the anchors' patterns (Hyperscan) rather than their literals."""
    from importlib.util import find_spec

    return choice() == "hyperscan" or choice() == "auto" and find_spec("hyperscan") is not None


def build(literals: list[bytes], once: frozenset[int] = frozenset()) -> AhoCorasick | Hyperscan | Substrings:
    """The literal engine: ERRMAP_PREFILTER=hyperscan-literals, =ahocorasick or =none pick one. The literals at the
    indexes in `once` need only their first hit in a block: Hyperscan reports no more (the others report all)."""
    chosen = choice()
    if chosen == "none":
        return Substrings(literals)
    if chosen in ("auto", "hyperscan", "hyperscan-literals"):
        try:
            return Hyperscan(literals, once=once)
        except ImportError:
            if chosen != "auto":
                raise
    return AhoCorasick(literals)


def engine() -> str:
    """The name of the engine stage one runs here, without building it (for `errmap --version`)."""
    if patterns_wanted():
        return "hyperscan, with anchor supersets"
    if choice() == "none":
        return Substrings.name
    if choice() == "ahocorasick":
        return AhoCorasick.name
    from importlib.util import find_spec

    return Hyperscan.name if find_spec("hyperscan") is not None else AhoCorasick.name
