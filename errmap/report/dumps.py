"""`--format json` and `--format jsonl`: JSON as errmap prints it, the whole report (the contract of
report/contract.py) or one diagnosis a line. The other machine formats have a module each (sarif, github).
"""

from __future__ import annotations

import io
import json
from itertools import islice
from typing import Any

import regex

from errmap.report.inert import BIDI

# Characters JSON may carry raw that a terminal acts on: DEL and the C1 controls (U+009B is a CSI);
# json.dumps already escapes C0. Bidi controls reorder what a terminal shows; line and paragraph separators
# break JavaScript readers; a lone surrogate (a byte of a file name that is not UTF-8) is no UTF-8 at all.
# `##[` is escaped too (`#\u005b`): the GitHub runner reads it as a command anywhere in a line (report/inert.py).
_RAW = regex.compile(f"[\x7f-\x9f\u2028\u2029{BIDI}\ud800-\udfff]|(?<=#)#\\[")


def dumps(doc: Any, indent: int | None = 2) -> str:
    """JSON as errmap prints it: valid UTF-8 text, every control character escaped (safe on a terminal and in CI);
    a name that is not UTF-8 keeps its bytes as JSON escapes (`\\udcff`: Python's json reads the name back)."""
    pieces = json.JSONEncoder(indent=indent, ensure_ascii=False, default=str,
                              separators=None if indent else (",", ":")).iterencode(doc)
    out = io.StringIO()
    while batch := list(islice(pieces, 4096)):  # never all the pieces at once: a report of a million files has millions
        out.write("".join(batch))
    return _RAW.sub(lambda m: f"\\u{ord(m[0]):04x}" if len(m[0]) == 1 else "#\\u005b", out.getvalue())


def jsonl(d: dict[str, Any]) -> str:
    """One diagnosis as one line of JSON (for `watch` and `run`, as each happens)."""
    return dumps(d, indent=None)
