"""`--format sarif`: a SARIF 2.1.0 log of the diagnoses of `Report.diagnoses` (one rule per errno, one
result per diagnosis and per unrecognized error), for code-scanning tools. Every location is a valid URI
reference: a relative path as one, an absolute path as a file:// URI, and a file on a node of a Ray cluster
relative to that node's base URI (file://IP/, in run.originalUriBaseIds)."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from importlib.metadata import PackageNotFoundError, version
from itertools import count
from typing import Any


SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _version() -> str:
    try:
        return version("errmap")
    except PackageNotFoundError:
        return "0"


def _fingerprint(d: dict[str, Any]) -> str:
    key = json.dumps([d["errno"], sorted(d["captures"].items())])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def sarif(diagnoses: list[dict[str, Any]], unrecognized: list[dict[str, Any]],
          nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A SARIF 2.1.0 log: one rule per errno, one result per diagnosis (and per unrecognized error). `nodes` are the
    nodes of a cluster scan (`label`, `ip`, `node_id`), whose files' paths start with 'label:'."""
    bases = {n["label"]: {"uri": f"file://{_host(n['ip'])}/", "description": {"text": f"node {n['label']} ({n['node_id']})"}}
             for n in nodes or ()}
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
                "help": {"text": "\n".join(f"{n}. {s}" for n, s in zip(d.get("fix_numbers") or count(1), d["fix"]))},
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
            "locations": [_location(ev["file"], ev["line"], bases) for ev in d["evidence"][:1]],
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
            "locations": [_location(u["file"], u["line"], bases)],
        })
    run: dict[str, Any] = {"tool": {"driver": {"name": "errmap", "version": _version(), "rules": rules}}, "results": results}
    if bases:
        run["originalUriBaseIds"] = bases
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def _location(path: str, line: int, bases: dict[str, Any]) -> dict[str, Any]:
    label = next((b for b in bases if path.startswith(b + ":/")), None)
    if label is not None:
        where = {"uri": urllib.parse.quote(path[len(label) + 2:], errors="surrogateescape"), "uriBaseId": label}
    else:
        where = {"uri": "file://" + urllib.parse.quote(path, errors="surrogateescape") if path.startswith("/") else urllib.parse.quote(path, errors="surrogateescape")}
    return {"physicalLocation": {"artifactLocation": where, "region": {"startLine": max(line, 1)}}}
