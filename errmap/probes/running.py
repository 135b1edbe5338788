"""Running probes: the registry of every probe function by name, and one probe run with its timeout.

Sits above the probe modules (it imports them so they register) and below their users (verify, doctor)."""

from __future__ import annotations

import threading
import time
from typing import Any

from errmap.probes.base import REGISTRY, Context, Fact, Unknown, Via


def registry():
    """Every probe function, by name (imports the probe modules; they import nothing heavy)."""
    from errmap.probes import config, files, gpu, host, versions  # noqa: F401  (registers)

    return REGISTRY


def run(name: str, ctx: Context | None = None, timeout: float | None = None) -> Fact:
    """Run one probe with its timeout; never raises."""
    ctx = ctx or Context()
    p = registry().get(name)
    if p is None:
        return Fact(name, known=False, reason="no such probe")
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = p.fn(ctx)
        except Unknown as exc:
            box["unknown"] = str(exc)
        except Exception as exc:  # a probe must not take the report down with it
            box["unknown"] = f"probe failed: {type(exc).__name__}: {exc}"[:300]

    t0 = time.monotonic()
    th = threading.Thread(target=target, name=f"probe {name}", daemon=True)
    th.start()
    th.join(timeout or p.timeout)
    took = round(time.monotonic() - t0, 3)
    if th.is_alive():
        return Fact(name, known=False, reason=f"timed out after {timeout or p.timeout:g}s", seconds=took)
    if "unknown" in box:
        return Fact(name, known=False, reason=box["unknown"], seconds=took)
    value, how = box.get("value"), None
    if isinstance(value, Via):
        value, how = value
    return Fact(name, value, via=how, seconds=took)
