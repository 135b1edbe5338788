"""Comparing a fact with a value, as a KB rule says: a check of probes/verify.py and a prediction of
kb/predict.py read values (a key of a mapping, in each element of a list) and compare scalars (versions,
numbers, booleans, text) the same way."""

from __future__ import annotations

import re
from typing import Any


_VERSION = re.compile(r"\d+(\.\d+)*")


def pick(value: Any, key: str | None) -> Any:
    """value[key], also inside each element of a list of mappings."""
    if key is None:
        return value
    if isinstance(value, dict):
        return value.get(key)
    if isinstance(value, list):
        return [v.get(key) if isinstance(v, dict) else None for v in value]
    return None


def _as_number(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x.strip())
        except ValueError:
            return None
    return None


def _as_version(x: Any) -> tuple[int, ...] | None:
    if isinstance(x, str) and _VERSION.fullmatch(x.strip()):
        return tuple(int(p) for p in x.strip().split("."))
    return None


def _as_bool(x: Any) -> bool | None:
    if isinstance(x, bool):
        return x
    if isinstance(x, str) and x.strip().lower() in ("true", "false"):
        return x.strip().lower() == "true"
    return None


def compare(a: Any, op: str, b: Any) -> bool | None:
    """a op b for one scalar; None when they cannot be compared."""
    if a is None or b is None:
        return None
    if op in ("==", "!=") and (_as_bool(a) is not None or _as_bool(b) is not None):
        ba, bb = _as_bool(a), _as_bool(b)
        if ba is None or bb is None:
            return None
        return (ba == bb) == (op == "==")
    va, vb = _as_version(a), _as_version(b)
    if va is not None and vb is not None and isinstance(a, str) and isinstance(b, str):
        n = max(len(va), len(vb))
        x, y = va + (0,) * (n - len(va)), vb + (0,) * (n - len(vb))
    else:
        x, y = _as_number(a), _as_number(b)
        if x is None or y is None:
            if op in ("==", "!="):
                return (str(a) == str(b)) == (op == "==")
            return None
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op]


def contains(a: Any, b: Any) -> bool:
    """Whether collection/text a has b (a list item, a mapping key, a substring)."""
    if isinstance(a, dict):
        return b in a
    if isinstance(a, (list, tuple, set)):
        return b in a or str(b) in [str(x) for x in a]
    if isinstance(a, str):
        return str(b) in a
    return False


def empty(a: Any) -> bool:
    return a is None or a is False or a == 0 and not isinstance(a, bool) or (hasattr(a, "__len__") and len(a) == 0)
