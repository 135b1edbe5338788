"""The knowledge base against the catalog, and every fixture against the KB."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import CATALOG, FIXTURES, ROOT
from errmap.kb import load as kbmod
from errmap.kb import files as kbfiles
from errmap.kb import model as kbmodel
from errmap.kb.check import check
from errmap.scan.events import Match, Unrecognized
from errmap.scan.scanner import scan_chunks
from errmap.scan.triage import Triage

KB_FILES = sorted((ROOT / "kb").glob("*.yaml"))
FIXTURE_LOGS = sorted(p for p in FIXTURES.glob("1*/*.log"))
CLEAN_LOGS = sorted((FIXTURES / "clean").glob("*.log"))


def catalog() -> dict:
    if not CATALOG.is_file():
        pytest.skip("../shared/catalog.yaml is not beside this checkout")
    text = CATALOG.read_text()
    data = yaml.safe_load(text)
    groups = {}
    # Group names hold commas, which a YAML flow mapping splits: read them from the text as written.
    for lo, hi, name in re.findall(r"\{range: (\d+)-(\d+), name: (.+)\}", text):
        for n in range(int(lo), int(hi) + 1):
            groups[n] = name
    return {c["errno"]: {**c, "group": groups[c["errno"]]} for c in data["codes"]}


def test_kb_check_passes():
    assert check([]) == []


def test_every_code_of_the_catalog_has_its_entry(kb):
    cat = catalog()
    assert sorted(kb.entries) == sorted(cat)
    for errno, c in cat.items():
        e = kb.entries[errno]
        assert (e.slug, e.title, e.role, e.group) == (c["slug"], c["title"], c["role"], c["group"]), errno
        assert (ROOT / "kb" / f"{errno}-{c['slug']}.yaml").is_file()


def test_every_entry_is_complete_and_proven(kb):
    for e in kb:
        logs = list((FIXTURES / str(e.errno)).glob("*.log"))
        assert len(logs) >= 3, f"{e.errno}: {len(logs)} fixtures"
        assert e.links and e.fix and e.anchors, e.errno


def _sidecar(log: Path) -> dict:
    side = log.with_suffix(".source.yaml")
    assert side.is_file(), f"{log} has no {side.name}"
    meta = yaml.safe_load(side.read_text()) or {}
    assert meta.get("origin") in ("recorded", "built"), f"{side}: origin must be recorded or built"
    assert meta.get("how"), f"{side}: how the log was made"
    if meta["origin"] == "built":
        assert meta.get("message_source"), f"{side}: a built log names where its message comes from"
    return meta


def diagnose(matcher, log: Path) -> tuple[list[int], Triage]:
    triage = Triage()
    for ev in scan_chunks(matcher, str(log), [log.read_bytes()]):
        triage.add(ev)
    return [i.entry.errno for i in triage.ranked()], triage


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_gives_its_code_first(kb, matcher, log):
    meta = _sidecar(log)
    folder = int(log.parent.name)
    expect = meta.get("expect") or [folder]
    codes, _ = diagnose(matcher, log)
    assert codes, f"{log}: no diagnosis"
    assert codes[0] == expect[0], f"{log}: diagnosed {codes}, expected {expect[0]} first"
    # Another code may show up only where the KB relates the two (a cascade or a known companion).
    entry = kb.entries.get(folder)
    allowed = {folder, *expect}
    if entry is not None:
        allowed |= {*entry.related, *entry.caused_by}
    for other in codes:
        if other in allowed:
            continue
        o = kb.entries[other]
        assert folder in o.related or folder in o.caused_by or set(o.caused_by) & allowed, (
            f"{log}: {other} also matched, and the KB does not relate it to {folder}"
        )


@pytest.mark.parametrize("log", CLEAN_LOGS, ids=lambda p: p.stem)
def test_clean_log_gives_nothing(matcher, log):
    _sidecar(log)
    events = list(scan_chunks(matcher, str(log), [log.read_bytes()]))
    found = [
        f"line {e.line.lineno}: {e.entry.errno if isinstance(e, Match) else 'unrecognized'}: {e.line.text[:120]}"
        for e in events if isinstance(e, (Match, Unrecognized))
    ]
    assert not found, f"{log}: " + "; ".join(found)


def test_enough_clean_logs():
    assert len(CLEAN_LOGS) >= 25


def test_prefilter_literals_are_rare_in_healthy_logs(matcher):
    """Stage two runs only on lines holding a literal; a literal every healthy step line holds
    (a metric name, an INFO banner) would make every scan slow. Generic failure words excluded, and the
    stack's names (a set lookup per line, no decoding, no pattern)."""
    from errmap.kb.stacks import LITERALS
    from errmap.scan.failures import GENERIC_LITERALS, LEVEL_LITERALS, UNGATED_LITERALS
    from errmap.scan.matcher import FRAME_LITERAL, TRACEBACK_LITERAL

    shapes = GENERIC_LITERALS + UNGATED_LITERALS + LEVEL_LITERALS  # the failure shapes' words (failures.py)
    generic = {lit.encode() for lit in shapes} | {FRAME_LITERAL, TRACEBACK_LITERAL, *LITERALS}
    lines = candidates = 0
    for log in CLEAN_LOGS:
        data = log.read_bytes()
        lines += data.count(b"\n") + 1
        starts = {
            data.rfind(b"\n", 0, end) for i, end in matcher.prefilter.hits(data) if matcher.literals[i] not in generic
        }
        candidates += len(starts)
    assert candidates <= 0.02 * lines, f"{candidates} of {lines} healthy lines reach stage two"


# ---------------------------------------------------------------- fix steps and links by stack

USER_ENTRY = """\
errno: 9101
slug: stack-test
title: a stack test
group: test
role: root
summary: an entry to test fix steps by stack
anchors:
  - {literal: "boom", regex: "boom (?P<n>\\\\d+)", source: "test"}
cause: "a cause for the test"
fix:
  - "a plain string is a general step"
  - text: "TRL: lower it"
    stack: trl
  - text: "for two stacks"
    stack: [verl, openrlhf]
links:
  - {url: "https://example.org/x", kind: docs, title: "docs", stack: pytorch}
"""


def test_fix_steps_and_links_carry_their_stacks(tmp_path):
    path = tmp_path / "9101-stack-test.yaml"
    path.write_text(USER_ENTRY)
    e = kbmod.load_entry(path, kbmodel.USER_RANGE)
    assert [(s.text, s.stack) for s in e.fix] == [
        ("a plain string is a general step", ()), ("TRL: lower it", ("trl",)), ("for two stacks", ("verl", "openrlhf"))]
    assert e.links[0].stack == ("pytorch",)
    assert kbmodel.Entry.from_dict(e.to_dict()) == e  # the cache round trip keeps them
    path.write_text(USER_ENTRY + "unshown: {n: read by a check}\n")
    e = kbmod.load_entry(path, kbmodel.USER_RANGE)
    assert e.unshown == (("n", "read by a check"),) and kbmodel.Entry.from_dict(e.to_dict()) == e


def test_an_unknown_stack_is_named_with_its_line(tmp_path):
    path = tmp_path / "9101-stack-test.yaml"
    path.write_text(USER_ENTRY.replace("stack: trl", "stack: trll"))
    with pytest.raises(kbfiles.KBError) as err:
        kbmod.load_entry(path, kbmodel.USER_RANGE)
    assert f"{path}:13: fix.1.stack.0: Input should be 'verl'" in str(err.value), err.value


def test_every_stack_has_its_names_and_builds_on_known_stacks():
    from errmap.kb import stacks

    for s in stacks.STACKS:
        assert s.name.keys() == {"en", "zh"} and all(s.name.values()), s
        assert set(s.builds_on) <= set(stacks.ORDER), s
    assert {h.means for h in stacks.IMPLIED} <= set(stacks.ORDER)
    assert len(set(stacks.ORDER)) == len(stacks.ORDER)


def test_the_runtime_types_have_the_fields_of_the_schema():
    """kb/model.py's dataclasses (a warm cache builds them without pydantic) and kb/schema.py's models (a cold
    load validates with them) define the same things twice: their fields must stay the same."""
    import dataclasses

    from errmap.kb import schema

    pairs = [(name, cls) for name, cls in vars(kbmodel).items()
             if dataclasses.is_dataclass(cls) and isinstance(getattr(schema, name, None), type)
             and issubclass(getattr(schema, name), schema.BaseModel)]
    assert {name for name, _ in pairs} >= {"Anchor", "Step", "Link", "Check", "Condition", "Prediction", "ExitCause", "Entry"}
    for name, cls in pairs:
        assert {f.name for f in dataclasses.fields(cls)} == set(getattr(schema, name).model_fields), name


def test_every_capture_is_shown_or_declared_unshown(kb):
    """A capture is read from the log to be shown: each one is a placeholder of the cause or a fix step,
    in English and in Chinese, unless the entry's `unshown` names what reads it instead."""
    missing = []
    for e in kb:
        declared = dict(e.unshown)
        zh = kb.zh.get(e.errno)
        for lang, texts in (("en", [e.cause, *(s.text for s in e.fix)]), ("zh", [zh.cause, *zh.fix] if zh else [])):
            shown = set(kbmodel.PLACEHOLDER.findall(" ".join(texts)))
            missing += [f"{e.errno} {lang}: {{{name}}}" for name in sorted(e.captures - shown - set(declared))]
        assert all(reason.strip() for reason in declared.values()), e.errno
    assert not missing, "captured but never shown nor declared unshown:\n" + "\n".join(missing)


def test_unshown_names_a_capture_that_is_not_shown(tmp_path):
    path = tmp_path / "9101-stack-test.yaml"
    for unshown, says in (("{nope: x}", "unshown 'nope' is not a capture"), ("{n: a check}", "unshown 'n' is shown")):
        path.write_text(USER_ENTRY.replace("a cause for the test", "a cause for the test: {n}") + f"unshown: {unshown}\n")
        with pytest.raises(kbfiles.KBError) as err:
            kbmod.load_entry(path, kbmodel.USER_RANGE)
        assert says in str(err.value), err.value


def test_a_template_leaves_out_the_fragments_a_log_fills_in(kb):
    e = kb.get(1021)
    template = e.fill(e.cause)
    assert "[[" not in template and "<killed>" not in template and template.startswith("The host ran out of RAM")
    filled = e.fill(e.cause, {"tried_bytes": "262144000"})
    assert "could not get 262144000 bytes" in filled and "<killed>" not in filled
