"""Loading the knowledge base: one YAML file per errno, validated (errmap/kb/schema.py) into `Entry` values.

Loading never executes anything from YAML (safe loader only) and every problem names its file
and line, so a broken entry is as easy to fix as a compiler error. Validated entries are cached as
JSON, keyed by the names, sizes and times of the KB files, so a run whose KB did not change reads
one file and imports neither YAML parsing nor pydantic.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from errmap.kb.files import KBError, Loader, line_map, line_of, official_dir, parse, read
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
    if not entry.links and allowed == OFFICIAL_RANGE:
        raise KBError([f"{path}:1: links: an errmap code needs at least one upstream link (your own entries, "
                       f"{USER_RANGE.start}-{USER_RANGE.stop - 1}, may have none)"])
    if not path.name.startswith(f"{entry.errno}-{entry.slug}."):
        raise KBError([f"{path}:1: file name must be {entry.errno}-{entry.slug}.yaml"])
    return entry


def load_dir(folder: Path, allowed: range) -> tuple[dict[int, Entry], list[str]]:
    entries: dict[int, Entry] = {}
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
            problems.append(f"{path}:1: errno {entry.errno} defined twice")
            continue
        entries[entry.errno] = entry
    return entries, problems


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


CACHE_VERSION = 5


def cache_dir() -> Path:
    return Path(os.environ.get("ERRMAP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "errmap"
    ))


def write_cache(path: Path, data: bytes) -> bool:
    """Write a cache file whole or not at all (a reader never sees half of it); False where the home is read-only."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return True
    except OSError:
        return False


def _cache_file(folders: list[tuple[Path, range]]) -> Path | None:
    """Where the validated KB of exactly these files is cached; None when there is nowhere to put it."""
    base = cache_dir()
    code = [Path(__file__).with_name(f) for f in ("load.py", "model.py", "schema.py", "translations.py")]
    h = hashlib.sha256(f"{CACHE_VERSION} {[p.stat().st_mtime_ns for p in code]}".encode())
    for folder, allowed in folders:
        h.update(f"|{folder.resolve()}:{allowed.start}".encode())
        try:
            names = sorted(os.scandir(folder), key=lambda d: d.name)
        except OSError:
            continue
        try:  # the Chinese sidecars in <folder>/zh/ too
            names += sorted(os.scandir(folder / "zh"), key=lambda d: d.name)
        except OSError:
            pass
        for d in names:
            if d.name.endswith((".yaml", ".yml")):
                try:
                    st = d.stat()
                except OSError:  # a dangling or looping link: load() reports it
                    h.update(f"/{d.path}:?".encode())
                    continue
                h.update(f"/{d.path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return Path(base) / f"kb-{h.hexdigest()[:24]}.json"


CACHE_KEEP = 8  # cached KB states kept (one per set of KB files); older ones are removed


def _prune(cache: Path) -> None:
    """Remove all but the CACHE_KEEP newest cached KB states beside `cache`."""
    states = sorted(cache.parent.glob("kb-*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in states[CACHE_KEEP:]:
        old.unlink(missing_ok=True)


def load(extra: list[Path] | None = None) -> KB:
    """The official KB plus user folders (`extra`, ERRMAP_KB_PATH).

    Never fatal: an entry that does not validate is skipped and reported in `warnings`, so one bad
    file costs its own code and nothing else. `errmap kb check` is the strict gate.
    """
    env = os.environ.get("ERRMAP_KB_PATH", "")
    folders = [(official_dir(), OFFICIAL_RANGE)]
    folders += [(f, USER_RANGE) for f in [*(extra or []), *(Path(p) for p in env.split(os.pathsep) if p)]]
    cache = _cache_file(folders)
    try:
        cached = json.loads(cache.read_text())
        from errmap.kb.translations import Text

        return KB({e["errno"]: Entry.from_dict(e) for e in cached["entries"]}, tuple(cached["warnings"]),
                  {int(n): Text.from_dict(t) for n, t in cached["zh"].items()})
    except (OSError, ValueError, KeyError, TypeError):
        pass
    entries: dict[int, Entry] = {}
    warnings: list[str] = []
    zh: dict[int, Any] = {}
    for folder, allowed in folders:
        if not folder.is_dir():
            warnings.append(f"{folder}: not a folder; knowledge base skipped")
            continue
        found, bad = load_dir(folder, allowed)
        warnings += bad
        entries.update(found)
        zh.update(load_translations(folder, found, warnings))
    warnings += cross_check(entries)
    doc = {"entries": [e.to_dict() for e in entries.values()], "warnings": warnings,
           "zh": {n: asdict(t) for n, t in zh.items()}}
    if write_cache(cache, json.dumps(doc).encode()):  # a read-only home: run without a cache
        _prune(cache)
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
