"""The probe contract: a named function, a timeout, and a fact or `unknown` with the reason.

A probe never raises and never hangs the caller: it runs in a daemon thread and is abandoned
after its timeout. It reads what it needs from a `Context` (the data file, the model folder,
the captures of the diagnosis, the training overrides) and returns a value; raising `Unknown`
says why it could not tell ("torch not installed", "no NVIDIA driver", "file not found").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TIMEOUT = 10.0


class Unknown(Exception):
    """Raised by a probe that cannot tell; the message is the reason shown to the user."""


@dataclass(frozen=True)
class Fact:
    """What one probe found: a value (with the way it was read) or unknown with the reason."""

    probe: str
    value: Any = None
    known: bool = True
    reason: str | None = None  # why unknown
    via: str | None = None  # torch, nvml, libcuda, nvidia-smi, /proc, pyarrow, ...
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        if not self.known:
            return {"unknown": self.reason}
        out: dict[str, Any] = {"value": self.value}
        if self.via:
            out["via"] = self.via
        return out

    def show(self) -> str:
        """The fact in a few words for text output."""
        if not self.known:
            return f"unknown ({self.reason})"
        return short(self.value)


def short(value: Any, limit: int = 160) -> str:
    if isinstance(value, dict) and not value:
        text = "none"
    elif isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
        text = ", ".join(f"{k} ({' '.join(str(x) for x in v.values() if x is not None)})" for k, v in value.items())
    elif isinstance(value, dict) and any(v is None for v in value.values()) and any(v is not None for v in value.values()):
        have = ", ".join(f"{k}={short(v, 60)}" for k, v in value.items() if v is not None)
        text = have + "; none: " + ", ".join(k for k, v in value.items() if v is None)
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={short(v, 60)}" for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(short(v, 60) for v in value) + "]"
    elif value is None:
        text = "none"
    else:
        text = str(value)
    return clip(text, limit)


def clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters between words, never inside one (a path, a version):
    a first word longer than `limit` is kept whole."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 1)
    if cut <= 0:
        cut = text.find(" ", limit)
        if cut < 0:
            return text
    return text[:cut].rstrip(",;:") + " …"


@dataclass
class Context:
    """What the probes may look at besides the machine itself."""

    data: str | None = None  # a parquet file: --data, or data.train_files found in the log
    model: str | None = None  # a model folder: --model, or actor_rollout_ref.model.path in the log
    captures: dict[str, str] = field(default_factory=dict)  # of the diagnosis being verified
    config: dict[str, str] = field(default_factory=dict)  # training overrides: dotted key -> value
    cache: dict[str, Fact] = field(default_factory=dict)

    def capture(self, *names: str) -> str | None:
        for name in names:
            if self.captures.get(name):
                return self.captures[name]
        return None

    def setting(self, key: str, default: str | None = None) -> str | None:
        """A training setting as given on the command line or printed in the log."""
        for k in (key, "+" + key, "++" + key):
            if k in self.config:
                return self.config[k]
        return default

    def key(self) -> tuple:
        return (self.data, self.model, tuple(sorted(self.captures.items())), tuple(sorted(self.config.items())))


@dataclass(frozen=True)
class Probe:
    name: str
    fn: Callable[[Context], Any]
    timeout: float
    uses: tuple[str, ...]  # the context it reads: "data", "model", "captures", "config"; () = machine only


REGISTRY: dict[str, Probe] = {}


def probe(name: str, timeout: float = DEFAULT_TIMEOUT, uses: tuple[str, ...] = ()) -> Callable:
    """Register a function as the probe `name`. It returns the value, or (value, via)."""

    def register(fn: Callable[[Context], Any]) -> Callable[[Context], Any]:
        REGISTRY[name] = Probe(name, fn, timeout, uses)
        return fn

    return register


class Via(tuple):
    """A value together with the way it was read: `return Via((value, "nvml"))`."""


def via(value: Any, how: str) -> Via:
    return Via((value, how))
