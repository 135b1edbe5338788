"""`--format github`: GitHub Actions workflow commands (annotations) for the diagnoses of `Report.diagnoses`."""

from __future__ import annotations

from itertools import count
from typing import Any

import regex

from errmap.report.inert import literal, visible

_CONTROL = regex.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape_data(s: str) -> str:
    """As the runner's toolkit escapes, every other control character as %XX (shown as such), and a bidi control
    or a byte that is not UTF-8 as a Python escape (`visible`)."""
    s = visible(s).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return _CONTROL.sub(lambda m: f"%{ord(m[0]):02X}", s)


def _escape_property(s: str) -> str:
    return _escape_data(literal(s)).replace(":", "%3A").replace(",", "%2C")


def github(diagnoses: list[dict[str, Any]], unrecognized: list[dict[str, Any]]) -> list[str]:
    """GitHub Actions workflow commands, escaped as the runner's toolkit does."""
    lines = []
    for d in diagnoses:
        level = "error" if d["role"] == "root" else "warning"
        title = f"errmap {d['errno']} {d['slug']}"
        props = f"file={_escape_property(d['file'])},line={d['line']},title={_escape_property(title)}"
        fix = "\n".join(f"{n}. {s}" for n, s in zip(d.get("fix_numbers") or count(1), d["fix"]))
        lines.append(f"::{level} {props}::{_escape_data(d['title'] + ': ' + d['cause'] + chr(10) + fix)}")
    for u in unrecognized:
        props = f"file={_escape_property(u['file'])},line={u['line']},title={_escape_property('errmap unrecognized error')}"
        lines.append(f"::error {props}::{_escape_data(u['message'] or u['type'])}")
    return lines
