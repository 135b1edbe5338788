"""Loading the knowledge base: one YAML file per errno, validated (errmap/kb/schema.py) into `Entry` values.

Loading never executes anything from YAML (safe loader only) and every problem names its file
and line, so a broken entry is as easy to fix as a compiler error. Validated entries are cached as
JSON (kb/cache.py), keyed by the hash of the KB files' bytes, so a run whose KB did not change reads
one file and imports neither YAML parsing nor pydantic.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from errmap.kb import cache
from errmap.kb.files import MAX_FILE, KBError, Loader, line_map, line_of, official_dir, parse, read
from errmap.kb.model import KB, OFFICIAL_RANGE, USER_RANGE, Entry


def load_entry(path: Path, allowed: range = OFFICIAL_RANGE) -> Entry:
    """Parse and validate one KB file; raise KBError with file:line for every problem."""
    text = read(path)
    data = parse(path, text)
    if not isinstance(data, dict):
        raise KBError([f"{path}:1: expected a mapping of fields"])
    from pydantic import ValidationError

    from errmap.kb import schema

    try:
        entry = Entry.from_dict(schema.Entry.model_validate(data).model_dump())
    except ValidationError as exc:
        lines = line_map(yaml.compose(text, Loader=Loader))  # positions only when there is a problem
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            where = ".".join(str(p) for p in loc) or "entry"
            problems.append(f"{path}:{line_of(lines, loc)}: {where}: {err['msg']}")
        raise KBError(problems) from None
    if entry.errno not in allowed:
        line = line_map(yaml.compose(text, Loader=Loader)).get(("errno",), 1)
        raise KBError([f"{path}:{line}: errno {entry.errno} outside {allowed.start}-{allowed.stop - 1}"])
    if (not entry.cause or not entry.fix) and allowed == OFFICIAL_RANGE:
        raise KBError([f"{path}:1: cause and fix: an errmap code says both (a draft of your own, "
                       f"{USER_RANGE.start}-{USER_RANGE.stop - 1}, may leave them empty)"])
    if not entry.links and allowed == OFFICIAL_RANGE:
        raise KBError([f"{path}:1: links: an errmap code needs at least one upstream link (your own entries, "
                       f"{USER_RANGE.start}-{USER_RANGE.stop - 1}, may have none)"])
    if not path.name.startswith(f"{entry.errno}-{entry.slug}."):
        raise KBError([f"{path}:1: file name must be {entry.errno}-{entry.slug}.yaml"])
    return entry


def load_dir(folder: Path, allowed: range, files: dict[int, Path] | None = None) -> tuple[dict[int, Entry], list[str]]:
    """A folder's entries by errno, and its problems; `files` gets each entry's file."""
    entries: dict[int, Entry] = {}
    where: dict[int, Path] = {} if files is None else files
    problems: list[str] = []
    for path in sorted(folder.glob("[0-9]*.y*ml")):  # entries are <errno>-<slug>.yaml; glossary.yaml is not one
        try:
            entry = load_entry(path, allowed)
        except KBError as exc:
            problems.extend(exc.problems)
            continue
        except Exception as exc:  # noqa: BLE001 - whatever a hostile file does, it costs its own entry only
            problems.append(f"{path}:1: cannot load: {type(exc).__name__}: {exc}"[:500])
            continue
        if entry.errno in entries:
            problems.append(f"{path}:1: errno {entry.errno} defined twice (first in {where[entry.errno]})")
            continue
        entries[entry.errno] = entry
        where[entry.errno] = path
    return entries, problems


def merge(entries: dict[int, Entry], files: dict[int, Path], found: dict[int, Entry], where: dict[int, Path]) -> list[str]:
    """Add one folder's entries (`found`, from the files `where`) to those of the folders before it (`entries`,
    from `files`). The first folder given defines a code: each later definition is a problem naming both files."""
    problems = [f"{where[n]}:1: errno {n} is already defined in {files[n]}; the first folder given wins, this file is not used"
                for n in sorted(found.keys() & entries.keys())]
    for n, entry in found.items():
        if n not in entries:
            entries[n], files[n] = entry, where[n]
    return problems


def cross_check(entries: dict[int, Entry]) -> list[str]:
    """Relations that only the whole KB can check: references to codes, unique slugs, probe names."""
    from errmap.probes import PROBES

    problems = []
    slugs: dict[str, int] = {}
    signals: dict[str, int] = {}
    hints: dict[frozenset[str], int] = {}
    for e in entries.values():
        where = f"{e.errno}-{e.slug}"
        if e.slug in slugs:
            problems.append(f"{where}: slug also used by {slugs[e.slug]}")
        slugs[e.slug] = e.errno
        for ref in [*e.related, *e.caused_by]:
            if ref not in entries:
                problems.append(f"{where}: refers to unknown errno {ref}")
        for name in [*e.probes, *(c.probe for c in e.checks), *(c.against for c in e.checks if c.against)]:
            if name not in PROBES:
                problems.append(f"{where}: unknown probe {name!r}")
        for x in e.exits:
            if x.signal in signals:
                problems.append(f"{where}: {x.signal} is already the exit cause of {signals[x.signal]}")
            signals[x.signal] = e.errno
        for h in e.hints:
            # readings.hinted lets the most specific hint win: two entries with the same words cannot be told apart
            if (other := hints.setdefault(frozenset(h), e.errno)) != e.errno:
                problems.append(f"{where}: hint {' + '.join(h)!r} is also a hint of {other}: nothing tells them apart")
    return problems


CACHE_VERSION = 6
CACHE_KEEP = 8  # cached KB states kept (one per set of KB files); older ones are removed


def _key(folders: list[tuple[Path, range]]) -> str:
    """The hash of what a validated KB is built from: the bytes of these folders' KB files (their Chinese
    sidecars in <folder>/zh/ too) and of the code that reads them. An edit that keeps a file's size and time
    (`cp -p`, `rsync -t`, `touch -r`) changes it."""
    h = hashlib.sha256(f"{CACHE_VERSION}".encode())
    for code in ("load.py", "model.py", "schema.py", "translations.py"):
        h.update(Path(__file__).with_name(code).read_bytes())
    for folder, allowed in folders:
        h.update(f"|{folder.resolve()}:{allowed.start}".encode(errors="surrogateescape"))
        for sub in (folder, folder / "zh"):
            try:
                names = sorted(d.name for d in os.scandir(sub) if d.name.endswith((".yaml", ".yml")))
            except OSError:
                continue
            for name in names:
                h.update(f"/{sub}/{name}:".encode(errors="surrogateescape") + _digest(sub / name))
    return h.hexdigest()


def _digest(path: Path) -> bytes:
    """The hash of a KB file's bytes (as much as `read` takes); b'?' for what is no regular file (load reports it)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO does not block here
    except OSError:
        return b"?"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return b"?"
        return hashlib.sha256(f.read(MAX_FILE + 1)).digest()


def load(extra: list[Path] | None = None) -> KB:
    """The official KB plus user folders (`extra`, then ERRMAP_KB_PATH's); a code defined in two folders is the
    first one's, and the other definition a warning.

    Never fatal: an entry that does not validate is skipped and reported in `warnings`, so one bad
    file costs its own code and nothing else. `errmap kb check` is the strict gate.
    """
    env = os.environ.get("ERRMAP_KB_PATH", "")
    folders = [(official_dir(), OFFICIAL_RANGE)]
    folders += [(f, USER_RANGE) for f in [*(extra or []), *(Path(p) for p in env.split(os.pathsep) if p)]]
    key = _key(folders)
    try:
        cached = json.loads(cache.read("kb", key) or b"")
        from errmap.kb.translations import Text

        return KB({e["errno"]: Entry.from_dict(e) for e in cached["entries"]}, tuple(cached["warnings"]),
                  {int(n): Text.from_dict(t) for n, t in cached["zh"].items()})
    except (OSError, ValueError, KeyError, TypeError):
        pass
    entries: dict[int, Entry] = {}
    files: dict[int, Path] = {}
    warnings: list[str] = []
    zh: dict[int, Any] = {}
    for folder, allowed in folders:
        if not folder.is_dir():
            warnings.append(f"{folder}: not a folder; knowledge base skipped")
            continue
        where: dict[int, Path] = {}
        found, bad = load_dir(folder, allowed, where)
        warnings += bad + merge(entries, files, found, where)
        zh.update({n: t for n, t in load_translations(folder, found, warnings).items() if files[n] == where[n]})
    warnings += cross_check(entries)
    doc = {"entries": [e.to_dict() for e in entries.values()], "warnings": warnings,
           "zh": {n: asdict(t) for n, t in zh.items()}}
    cache.write("kb", key, json.dumps(doc).encode(), keep=CACHE_KEEP)  # a read-only home: run without a cache
    return KB(entries, tuple(warnings), zh)


def load_translations(folder: Path, entries: dict[int, Entry], problems: list[str]) -> dict[int, Any]:
    """The Chinese sidecars of a folder's entries (kb/zh/<file name>), by errno; problems appended."""
    from errmap.kb.translations import load_dir

    texts, bad = load_dir(folder)
    problems += bad
    by_file = {f"{e.errno}-{e.slug}": e.errno for e in entries.values()}
    out = {}
    for name, text in texts.items():
        errno = by_file.get(name.rsplit(".", 1)[0])
        if errno is None:
            problems.append(f"{text.file}:1: no KB entry {name} for this Chinese text")
        else:
            out[errno] = text
    return out
