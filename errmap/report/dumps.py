"""`--format json` and `--format jsonl`: JSON as errmap prints it, the whole report (the contract of
report/contract.py) or one diagnosis a line. The other machine formats have a module each (sarif, github).
"""

from __future__ import annotations

import json
from typing import Any

import regex

# Characters JSON may carry raw that a terminal acts on: DEL and the C1 controls (U+009B is a CSI);
# json.dumps already escapes C0. Line and paragraph separators break JavaScript readers.
_RAW_CONTROL = regex.compile("[\x7f-\x9f\u2028\u2029]")


def dumps(doc: Any, indent: int | None = 2) -> str:
    """JSON as errmap prints it: UTF-8 text, every control character escaped (safe on a terminal)."""
    text = json.dumps(doc, indent=indent, ensure_ascii=False, default=str, separators=None if indent else (",", ":"))
    return _RAW_CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def jsonl(d: dict[str, Any]) -> str:
    """One diagnosis as one line of JSON (for `watch` and `run`, as each happens)."""
    return dumps(d, indent=None)
