"""`errmap doctor`: read this machine (and the run's data, model and settings) before a run starts,
print an environment block to paste into an issue, and warn about the codes this setup will hit.

What it warns about is KB data (`predicts:` in each entry, evaluated by errmap/predict.py); this
module reads the facts and settings. Settings come from the overrides given after `--`
(verl/Hydra style, `key=value`); a setting left out takes verl's default (kb/verl-defaults.yaml),
and the warning says so.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

from errmap.kb import datasets
from errmap.kb import load as kbmod
from errmap.kb import predict as predictions
from errmap.kb.model import KB
from errmap.kb.predict import Warning_
from errmap.probes import PROBES
from errmap.probes.base import Context, Fact
from errmap.probes.running import registry, run
from errmap.probes.config import all_files, parse_overrides

MACHINE_ORDER = [
    "gpu.count", "gpu.names", "gpu.capability", "gpu.bf16", "gpu.memory", "gpu.shared_memory", "gpu.processes",
    "env.cuda_visible_devices", "driver.version", "driver.cuda_version", "torch.version", "torch.cuda_version",
    "torch.cuda_build", "torch.arch_list", "torch.gpu_supported", "torch.cxx11_abi", "nvcc.version", "nccl.version",
    "pkg.versions", "pkg.conflicts", "host.memory", "host.shm", "host.disk", "env.nccl", "env.alloc_conf",
    "net.interfaces", "net.socket_ifname",
]
DATA_PROBES = ["data.file", "data.columns", "data.prompt_format", "data.data_source"]
MODEL_PROBES = ["model.files", "model.chat_template", "model.vocab", "model.type_known"]


@dataclass
class Doctor:
    config: dict[str, str]
    data: list[str]
    model: str | None
    facts: dict[str, Fact] = field(default_factory=dict)
    data_facts: dict[str, dict[str, Fact]] = field(default_factory=dict)
    model_facts: dict[str, Fact] = field(default_factory=dict)
    warnings: list[Warning_] = field(default_factory=list)
    typed: list[str] = field(default_factory=list)  # keys of overrides without `+` (which adds a key on purpose)
    stack: str | None = None  # the run's trainer (kb/stacks.yaml key), whose data rules apply (kb/datasets.yaml)
    stack_from: str = ""  # how it was known: --stack, the overrides, the installed packages
    probing: bool = False  # run a fact a prediction needs that the environment block did not read
    extra: dict[tuple, Fact] = field(default_factory=dict)  # those facts, by (name, captures, data file)

    # ------------------------------------------------------------ reading

    def setting(self, key: str) -> tuple[str | None, bool]:
        """(value, given): a setting from the overrides, else verl's default (given=False)."""
        for k in (key, "+" + key, "++" + key):
            if k in self.config:
                return self.config[k], True
        return predictions.verl_defaults().get(key), False

    def run_probes(self) -> None:
        ctx = Context(config=self.config, model=self.model)
        for name in MACHINE_ORDER:
            self.facts[name] = run(name, ctx)
        if os.environ.get("MASTER_PORT"):
            self.facts["host.port"] = run("host.port", ctx)
        self.facts["run.config"] = run("run.config", ctx)
        for path in self.data:
            dctx = Context(data=path, model=self.model, config=self.config)
            names = DATA_PROBES + (["data.prompt_tokens"] if self.model else []) + \
                (["data.dataset_info"] if self.stack == "llamafactory" else [])
            self.data_facts[path] = {n: run(n, dctx) for n in names}
        if self.model:
            mctx = Context(model=self.model, config=self.config)
            self.model_facts = {n: run(n, mctx) for n in MODEL_PROBES}
        self.probing = True

    def fact(self, name: str, captures: dict[str, str], path: str | None) -> Fact | None:
        """A fact for a prediction: of the data file `path` (data.*), the model (model.*) or the
        machine; one the environment block did not read runs now (once)."""
        pool = self.data_facts.get(path, {}) if name.startswith("data.") else self.model_facts if name.startswith("model.") else self.facts
        if not captures and name in pool:
            return pool[name]
        key = (name, tuple(sorted(captures.items())), path if name.startswith("data.") else None)
        if key not in self.extra and self.probing:
            self.extra[key] = run(name, Context(data=key[2], model=self.model, captures=dict(captures), config=self.config))
        return self.extra.get(key)

    # ------------------------------------------------------------ predicting

    def predict(self, kb: KB | None = None) -> None:
        """The warnings of the KB's predictions (errmap/predict.py) for this setup."""
        self.warnings = predictions.predict(self, kb if kb is not None else kbmod.load())

    # ------------------------------------------------------------ output

    def to_json(self, kb=None, zh=None) -> dict[str, Any]:
        """The JSON contract; `zh`, the KB in Chinese, adds each warning's Chinese text as a field of its own."""
        return {
            "version": 1,
            "errmap": _errmap_version(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "stack": {"key": self.stack, "from": self.stack_from} if self.stack else None,
            "facts": {n: f.to_json() for n, f in self.facts.items()},
            "data": {p: {n: f.to_json() for n, f in fs.items()} for p, fs in self.data_facts.items()},
            "model": {n: f.to_json() for n, f in self.model_facts.items()} if self.model else None,
            "warnings": [
                {"errno": w.errno, **_title(kb, w.errno), "says": w.says, **({"file": w.about} if w.about else {}), "facts": w.facts,
                 **({"zh": {"title": zh.entries[w.errno].title, "says": predictions.says_in(w, zh.entries[w.errno])}}
                    if zh is not None and w.errno in zh.zh else {})}
                for w in self.warnings
            ],
        }


def _errmap_version() -> str:
    try:
        import importlib.metadata as md

        return md.version("errmap")
    except Exception:
        return "unknown"


def _title(kb, errno: int) -> dict[str, str]:
    e = kb.get(errno) if kb is not None else None
    return {"slug": e.slug, "title": e.title} if e else {}


def trainer(config: dict[str, str], given: str | None = None) -> tuple[str | None, str]:
    """(the run's trainer, how it is known): --stack, else a verl override (verl's config keys), else the one trainer
    whose distribution is installed here (kb/stacks.yaml `pip`); (None, "") when none or several are."""
    import importlib.metadata as md

    from errmap.kb.stacks import STACKS

    if given:
        return given, "--stack"
    if any(predictions.is_verl_key(k.lstrip("+")) for k in config):
        return "verl", "the overrides"
    installed = []
    for s in STACKS:
        if s.key in datasets.rules():
            for dist in s.pip:
                try:
                    md.version(dist)
                    installed.append(s.key)
                    break
                except md.PackageNotFoundError:
                    pass
    return (installed[0], "the installed packages") if len(installed) == 1 else (None, "")


def diagnose_setup(data: list[str], model: str | None, overrides: list[str], kb: KB | None = None,
                   stack: str | None = None) -> Doctor:
    config = parse_overrides(overrides)
    files = list(data)
    for key in ("data.train_files", "data.val_files"):
        for k in (key, "+" + key, "++" + key):
            files += [f for f in all_files(config.get(k)) if f not in files]
    model = model or config.get("actor_rollout_ref.model.path")
    doc = Doctor(config, files, model, typed=[a.partition("=")[0] for a in overrides if "=" in a and not a.startswith("+")])
    doc.stack, doc.stack_from = trainer(config, stack)
    doc.run_probes()
    doc.predict(kb)
    return doc


def environment_rows(doc: Doctor) -> list[tuple[str, str]]:
    """The environment block as (label, value) rows: one fact a row, to paste into an issue."""
    rows = [("", f"errmap {_errmap_version()} doctor · Python {sys.version.split()[0]} · {platform.platform()}")]
    width = max(len(n) for n in PROBES) + 2
    for name, fact in doc.facts.items():
        if name == "run.config" and not doc.config:
            continue
        rows.append((f"{name:<{width}}", fact.show() + (f"  [{fact.via}]" if fact.known and fact.via else "")))
    if doc.data:  # whose rules the data is checked by
        rows.append((f"{'run.stack':<{width}}", f"{doc.stack}  [{doc.stack_from}]" if doc.stack else
                     "unknown: give --stack to check the data by a trainer's rules"))
    for path, facts in doc.data_facts.items():
        rows.append(("-- data ", path))
        rows += [(f"{n:<{width}}", f.show()) for n, f in facts.items()]
    if doc.model:
        rows.append(("-- model ", doc.model))
        rows += [(f"{n:<{width}}", f.show()) for n, f in doc.model_facts.items()]
    return rows


def print_doctor(con, doc: Doctor, kb=None) -> None:
    """The report in the current language, wrapped at the console's width with hanging indents (the
    environment block's facts as the probes give them, each wrapped under its value: it is pasted into
    issues); `kb`, if given, in that language too, names the codes and says the warnings."""
    from errmap.report.i18n import _, ngettext
    from errmap.report.layout import block
    from errmap.report.text import aside, escape

    block(con, "", f"[bold]{_('Environment')}[/][dim]{aside(_('paste this block into an issue'))}[/]")
    con.print("```", markup=False)
    for label, value in environment_rows(doc):
        block(con, escape(label), escape(value))
    con.print("```", markup=False)
    if not doc.warnings:
        block(con, "", f"[green]{_('No known failure predicted for this setup.')}[/]")
        return
    n = len(doc.warnings)
    con.print()
    block(con, "", f"[bold]{ngettext('{n} warning', '{n} warnings', n).format(n=n)}[/]{_(': codes this setup will hit')}")
    for w in doc.warnings:
        entry = kb.get(w.errno) if kb is not None else None
        block(con, f"  [bold red]{w.errno}[/] ", f"[bold]{escape(entry.title if entry else '')}[/]")
        block(con, "       ", escape(predictions.says_in(w, entry)))
    block(con, "", f"[dim]{_('errmap explain N shows the cause and fix of each code.')}[/]")


registry()  # probes are registered before any run
