"""Machine formats beyond the JSON contract: JSON lines, SARIF 2.1.0 and GitHub Actions annotations.

Each takes the diagnoses of `Report.diagnoses` and only formats them.
"""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import regex

# Characters JSON may carry raw that a terminal acts on: DEL and the C1 controls (U+009B is a CSI);
# json.dumps already escapes C0. Line and paragraph separators break JavaScript readers.
_RAW_CONTROL = regex.compile("[\x7f-\x9f\u2028\u2029]")
_CONTROL = regex.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _version() -> str:
    try:
        return version("errmap")
    except PackageNotFoundError:
        return "0"


def dumps(doc: Any, indent: int | None = 2) -> str:
    """JSON as errmap prints it: UTF-8 text, every control character escaped (safe on a terminal)."""
    text = json.dumps(doc, indent=indent, ensure_ascii=False, default=str, separators=None if indent else (",", ":"))
    return _RAW_CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def jsonl(d: dict[str, Any]) -> str:
    """One diagnosis as one line of JSON (for `watch` and `run`, as each happens)."""
    return dumps(d, indent=None)


def _fingerprint(d: dict[str, Any]) -> str:
    key = json.dumps([d["errno"], sorted(d["captures"].items())])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def sarif(diagnoses: list[dict[str, Any]], unrecognized: list[dict[str, Any]]) -> dict[str, Any]:
    """A SARIF 2.1.0 log: one rule per errno, one result per diagnosis (and per unrecognized error)."""
    rules: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    results = []
    for d in diagnoses:
        if d["errno"] not in index:
            index[d["errno"]] = len(rules)
            rule: dict[str, Any] = {
                "id": str(d["errno"]),
                "name": d["slug"],
                "shortDescription": {"text": d["title"]},
                "fullDescription": {"text": d["summary"]},
                "help": {"text": "\n".join(f"{i}. {s}" for i, s in enumerate(d["fix"], 1))},
                "properties": {"role": d["role"]},
            }
            if (d.get("docs") or "").startswith(("https://", "http://")):  # ERRMAP_DOCS_URL; never a local file:// page
                rule["helpUri"] = d["docs"]
            rules.append(rule)
        results.append({
            "ruleId": str(d["errno"]),
            "ruleIndex": index[d["errno"]],
            "level": "error" if d["role"] == "root" else "warning",
            "message": {"text": f"{d['title']}: {d['cause']}"},
            "locations": [_location(ev["file"], ev["line"]) for ev in d["evidence"][:1]],
            "partialFingerprints": {"errmapIncident/v1": _fingerprint(d)},
            "occurrenceCount": d["count"],
            "properties": {"captures": d["captures"], **({"verdict": d["verdict"]} if "verdict" in d else {})},
        })
    if unrecognized:
        rules.append({"id": "unrecognized", "shortDescription": {"text": "An error line no knowledge-base entry matches"}})
    for u in unrecognized:
        results.append({
            "ruleId": "unrecognized",
            "ruleIndex": len(rules) - 1,
            "level": "error",
            "message": {"text": f"Error not in the knowledge base: {u['message'] or u['type']}"[:1000]},
            "locations": [_location(u["file"], u["line"])],
        })
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "errmap", "version": _version(), "rules": rules}}, "results": results}],
    }


def _location(path: str, line: int) -> dict[str, Any]:
    return {"physicalLocation": {"artifactLocation": {"uri": path}, "region": {"startLine": max(line, 1)}}}


def _escape_data(s: str) -> str:
    """As the runner's toolkit escapes, and every other control character as %XX (shown as such)."""
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return _CONTROL.sub(lambda m: f"%{ord(m[0]):02X}", s)


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github(diagnoses: list[dict[str, Any]], unrecognized: list[dict[str, Any]]) -> list[str]:
    """GitHub Actions workflow commands, escaped as the runner's toolkit does."""
    lines = []
    for d in diagnoses:
        level = "error" if d["role"] == "root" else "warning"
        title = f"errmap {d['errno']} {d['slug']}"
        props = f"file={_escape_property(d['file'])},line={d['line']},title={_escape_property(title)}"
        fix = "\n".join(f"{i}. {s}" for i, s in enumerate(d["fix"], 1))
        lines.append(f"::{level} {props}::{_escape_data(d['title'] + ': ' + d['cause'] + chr(10) + fix)}")
    for u in unrecognized:
        props = f"file={_escape_property(u['file'])},line={u['line']},title={_escape_property('errmap unrecognized error')}"
        lines.append(f"::error {props}::{_escape_data(u['message'] or u['type'])}")
    return lines
