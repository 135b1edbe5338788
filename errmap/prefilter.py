"""Stage one of matching: find every anchor literal in a block of bytes in one pass.

Hyperscan (a regular dependency where it has wheels: Linux and macOS on x86_64) is used when it
imports (several times faster, identical hits); Aho-Corasick (ahocorasick-rs) is the pure fallback
elsewhere. ERRMAP_PREFILTER=ahocorasick or =hyperscan picks one explicitly. Both report (literal index, end offset): the end is enough to find
the line around a hit, since no literal holds a line break.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path


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

        self._db = _cached(literals)
        if self._db is None:
            self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            self._db.compile(expressions=literals, ids=list(range(len(literals))), elements=len(literals), flags=0, literal=True)
            _store(literals, self._db)

    def hits(self, block: bytes) -> Iterable[tuple[int, int]]:
        found: list[tuple[int, int]] = []

        def on_match(i: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            found.append((i, end))

        self._db.scan(block, match_event_handler=on_match)  # the handler is bound to a name: kept alive
        return found


def _db_file(literals: list[bytes]) -> Path:
    """The compiled database of exactly these literals (so of one KB's content), for this hyperscan."""
    import hyperscan

    from errmap.kb import cache_dir

    h = hashlib.sha256(hyperscan.__version__.encode())  # a database is tied to the library that built it
    for lit in literals:
        h.update(len(lit).to_bytes(4, "little") + lit)
    return cache_dir() / f"hs-{h.hexdigest()[:24]}.db"


def _cached(literals: list[bytes]):
    import hyperscan

    try:
        db = hyperscan.loadb(_db_file(literals).read_bytes(), hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)  # a loaded database comes without one
        return db
    except (OSError, hyperscan.HyperscanError):
        return None


def _store(literals: list[bytes], db) -> None:
    import hyperscan

    path = _db_file(literals)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(hyperscan.dumpb(db))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: compile each time


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
