"""Verification: a diagnosis plus live probe facts becomes confirmed, refuted or unverified.

The rules are KB data (`checks:` in each entry). A rule compares one probed fact (or a key of it)
with a constant, a capture of the diagnosis, or another probe's fact. Facts about several GPUs are
lists: a `confirmed` rule fires when any GPU satisfies it, a `refuted` rule only when all do, so one
old card among new ones is still evidence for the error and never refutes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from errmap.kb.compare import compare, contains, empty, pick
from errmap.kb.model import Check, Entry
from errmap.probes.base import Context, Fact, short
from errmap.probes.running import registry, run

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGTP]?i?B)\s*", re.I)
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50}
_FIELD_UNITS = {"_bytes": 1, "_mib": 1 << 20, "_gib": 1 << 30}


def in_field_unit(target: Any, field: str | None) -> Any:
    """A captured size with its unit ("180.00 GiB") in the unit a fact's field declares by its
    name (free_bytes, total_mib, free_gib); other targets unchanged."""
    if not isinstance(target, str) or not field:
        return target
    unit = next((u for suffix, u in _FIELD_UNITS.items() if field.endswith(suffix)), None)
    m = _SIZE.fullmatch(target)
    if unit is None or m is None:
        return target
    return float(m[1]) * _UNITS[m[2].lower()] / unit


@dataclass
class Verdict:
    verdict: str  # confirmed | refuted | unverified
    reasons: list[str]
    facts: dict[str, Fact] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "verdict_reasons": self.reasons,
            "facts": {name: f.to_json() for name, f in self.facts.items()},
        }


def probe_names(entry: Entry) -> list[str]:
    """The probes an entry reads: those it lists and those its checks compare, each once."""
    return list(dict.fromkeys([*entry.probes, *(c.probe for c in entry.checks), *(c.against for c in entry.checks if c.against)]))


class Prober:
    """Runs probes for diagnoses; facts about the machine alone are read once per run."""

    def __init__(self, base: Context | None = None):
        self.base = base or Context()
        self.machine: dict[str, Fact] = {}

    def context(self, captures: dict[str, str]) -> Context:
        b = self.base
        return Context(data=b.data, model=b.model, captures=dict(captures), config=dict(b.config))

    def fact(self, name: str, ctx: Context) -> Fact:
        p = registry().get(name)
        machine_only = p is not None and not p.uses
        if machine_only and name in self.machine:
            return self.machine[name]
        if name not in ctx.cache:
            ctx.cache[name] = run(name, ctx)
        if machine_only:
            self.machine[name] = ctx.cache[name]
        return ctx.cache[name]

    def verify(self, entry: Entry, captures: dict[str, str]) -> Verdict:
        ctx = self.context(captures)
        facts = {n: self.fact(n, ctx) for n in probe_names(entry)}
        return decide(entry, captures, facts)


# ---------------------------------------------------------------- rules


def fires(check: Check, value: Any, target: Any, has_target: bool) -> bool | None:
    """Whether the rule fires on this fact; None when it cannot be evaluated."""
    op = check.op
    if op in ("missing", "present", "contains"):
        if has_target:
            if value is None:
                return None
            held = contains(value, target)
            return held if op in ("present", "contains") else not held
        if op == "contains":
            return None
        return empty(value) if op == "missing" else not empty(value)
    if isinstance(value, list):
        results = [compare(v, op, target) for v in value]
        if not results or any(r is None for r in results):
            return None
        return any(results) if check.verdict == "confirmed" else all(results)
    return compare(value, op, target)


def _describe(check: Check, value: Any, target_text: str | None) -> str:
    name = check.probe + (f".{check.field}" if check.field else "")
    shown = short(value, 80)
    if check.op in ("missing", "present") and target_text is None or check.op == "==" and check.capture is None and check.against is None:
        return f"{name} = {shown}"
    return f"{name} = {shown} {check.op} {target_text}"


def decide(entry: Entry, captures: dict[str, str], facts: dict[str, Fact]) -> Verdict:
    confirmed: list[str] = []
    refuted: list[str] = []
    unknown: list[str] = []
    for check in entry.checks:
        fact = facts.get(check.probe)
        if fact is None or not fact.known:
            why = fact.reason if fact else "not run"
            note = f"{check.probe}: unknown ({why})"
            if note not in unknown:
                unknown.append(note)
            continue
        value = pick(fact.value, check.field)
        has_target, target, target_text = False, None, None
        if check.capture:
            if not captures.get(check.capture):
                continue
            has_target, target = True, in_field_unit(captures[check.capture], check.field)
            target_text = f"{check.capture} {captures[check.capture]}"
        elif check.against:
            other = facts.get(check.against)
            if other is None or not other.known:
                note = f"{check.against}: unknown ({other.reason if other else 'not run'})"
                if note not in unknown:
                    unknown.append(note)
                continue
            has_target, target = True, pick(other.value, check.against_field)
            target_text = f"{check.against}{'.' + check.against_field if check.against_field else ''} {short(target, 60)}"
        elif check.value is not None:
            has_target, target, target_text = True, check.value, short(check.value)
        if has_target and target is None:
            continue
        result = fires(check, value, target, has_target)
        if result:
            text = f"{check.says} ({_describe(check, value, target_text)})"
            (confirmed if check.verdict == "confirmed" else refuted).append(text)
    if confirmed and not refuted:
        return Verdict("confirmed", confirmed, facts)
    if refuted and not confirmed:
        return Verdict("refuted", refuted, facts)
    if confirmed and refuted:
        return Verdict("unverified", [f"conflicting: {r}" for r in confirmed + refuted], facts)
    if not entry.checks:
        return Verdict("unverified", ["no confirmation rule for this code"], facts)
    if unknown:
        return Verdict("unverified", unknown, facts)
    return Verdict("unverified", ["the probed facts neither confirm nor refute it"], facts)


# ---------------------------------------------------------------- the CLI's --probe


def probe_options(fn):
    """--probe, --data FILE and --model DIR, for scan and watch; --data or --model implies --probe."""
    import functools

    import click

    @functools.wraps(fn)
    def probing(*args, probe: bool = False, data_file: str | None = None, model_dir: str | None = None, **kwargs):
        return fn(*args, probe=probe or bool(data_file or model_dir), data_file=data_file, model_dir=model_dir, **kwargs)

    cmd = click.option("--model", "model_dir", type=click.Path(), metavar="DIR",
                       help="The model folder to check (implies --probe; else actor_rollout_ref.model.path in the log).")(probing)
    cmd = click.option("--data", "data_file", type=click.Path(), metavar="FILE",
                       help="The parquet or JSON lines file to check (implies --probe; else data.train_files in the log).")(cmd)
    return click.option("--probe", is_flag=True,
                        help="Confirm or refute each diagnosis on this machine (verdict and probed facts).")(cmd)


def sniff(sources) -> Any:
    """Collect the run's settings from these sources as the scan reads them (only with --probe)."""
    from errmap.probes.config import ConfigSniffer

    sniffer = ConfigSniffer()
    for s in sources:
        chunks = s.chunks
        s.chunks = lambda chunks=chunks: sniffer.wrap(chunks())
    return sniffer


def sniff_file(path: str, limit: int = 64 << 20) -> dict[str, str]:
    """Settings printed in the first `limit` bytes of a log file (watch --follow)."""
    from errmap.probes.config import ConfigSniffer

    sniffer = ConfigSniffer()
    try:
        with open(path, "rb") as f:
            while f.tell() < limit and (chunk := f.read(1 << 20)):
                sniffer.feed(chunk)
    except OSError:
        return {}
    sniffer.finish()
    return sniffer.settings


def prober_for(settings: dict[str, str], data: str | None, model: str | None) -> Prober:
    from errmap.probes.config import first_file

    data = data or first_file(settings.get("data.train_files"))
    model = model or settings.get("actor_rollout_ref.model.path")
    return Prober(Context(data=data, model=model, config=dict(settings)))


def probed_gpu(prober: Prober):
    """This machine's GPU from the gpu.names and gpu.capability probes (errmap.kb.gpus.GPU), or None."""
    from errmap.kb.gpus import from_probe

    ctx = prober.context({})
    return from_probe(prober.fact("gpu.names", ctx), prober.fact("gpu.capability", ctx))


def probed_versions(prober: Prober) -> dict[str, str]:
    """The releases installed here (package metadata, nothing imported), for the packages steps and fixes name."""
    from errmap.kb.versions import normal

    fact = prober.fact("pkg.versions", prober.context({}))
    found = fact.value if isinstance(getattr(fact, "value", None), dict) else {}
    return {normal(name): str(v) for name, v in found.items() if v}


def versioned(entry: Entry) -> bool:
    """Whether an entry's advice depends on the run's releases: a step with versions or a released fix."""
    return any(step.versions for step in entry.fix) or any(link.kind == "fix" for link in entry.links)


def reads_gpu(entry: Entry) -> bool:
    """Whether an entry's probes or checks read this machine's GPU: only then is the GPU probed (torch's import
    alone costs seconds and about 180 MB)."""
    return any(name.startswith("gpu.") for name in probe_names(entry))


def attach(report, prober: Prober) -> None:
    """Put verdict, verdict_reasons and facts of each incident into the report, and this machine's GPU when a
    diagnosis reads it."""
    if any(reads_gpu(inc.entry) for inc in report.triage.incidents.values()):
        report.probed_gpu = probed_gpu(prober)
    if any(versioned(inc.entry) for inc in report.triage.incidents.values()):
        report.probed_versions = probed_versions(prober)
    for inc in report.triage.ranked():
        report.extra[inc.fingerprint] = prober.verify(inc.entry, inc.captures).to_json()
