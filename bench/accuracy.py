"""errmap's accuracy on labelled corpora of failed-run logs.

    python bench/accuracy.py PATH [PATH...] [--errmap CMD] [--jobs N] [--timeout S] [--json OUT] [--verbose]

Each PATH is a corpus in one of two layouts, told apart by its files:
- labels.yaml: a list of rows with `file`, `root` (an errno; `none` for a healthy log; `out-of-catalog`
  for a real failure no code covers; `undeterminable`, skipped), `also` (other codes legitimately
  present), `key_line` and `difficulty`;
- corpus/labels.jsonl: GPUAlert's corpus (github.com/Parv-01/gpualert-eval), rows with `id`, `mode`
  (one of its 15 classes) and `log_path`; its classes map to errmap codes by GPUALERT below.

Each log is scanned by `CMD scan --format json LOG` in a process of its own. The rules: a labelled
failure is right when errmap's first diagnosis is its code (for a GPUAlert class, one of its codes); a
healthy log must get no diagnosis; an out-of-catalog failure must show as unrecognized, with nothing
diagnosed but a consequence code that its `also` lists; a failed run that gets neither a diagnosis
nor an unrecognized failure is counted as 'No error found'. A log that makes errmap fail, hang past
the timeout or print a traceback counts as a crash (and as a miss). Exit 1 when a log crashed errmap,
2 on a bad corpus or errmap that cannot list its codes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# GPUAlert's classes (eval/classes.py there) -> the errmap codes whose failure is a case of the class.
# A class named after a Python exception type or a signal says how a run failed, not why, and errmap
# has no code for a device mismatch (1016 is a dtype mismatch): those count as out-of-catalog (empty).
GPUALERT: dict[str, tuple[str, ...]] = {
    "cuda_oom": ("1017",),  # "GPU out-of-memory (CUDA OOM)"
    # "NCCL communication error": inject/nccl_timeout.py times an all-reduce out; torch reports an NCCL error
    "nccl": ("1025", "1026"),
    # "CUDA runtime error": inject/cuda_runtime.py sets off a device-side assert; its wild logs add an illegal memory access
    "cuda_runtime": ("1014", "1015"),
    "ram_oom": ("1021",),  # "System out-of-memory (RAM)": MemoryError, std::bad_alloc (1021: a host allocation failed)
    "oom_killer": ("1021",),  # "Process killed by OS (OOM)"
    "missing_module": ("1008",),  # "Missing Python module"
    "nan_loss": ("1045",),  # "NaN detected in loss"
    "segfault": (),
    "file_not_found": (),
    "permission": (),
    "div_zero": (),
    "device_mismatch": (),
    "traceback": (),
    "assertion": (),
    "runtime_error": (),
}


@dataclass(frozen=True)
class Case:
    file: str  # as the corpus names it
    path: Path
    label: str  # the corpus's own label: an errno, none, out-of-catalog or a GPUAlert class
    codes: tuple[str, ...]  # the right first diagnosis; empty for a healthy or out-of-catalog log
    healthy: bool
    also: tuple[str, ...] = ()
    detail: str = ""  # difficulty and key line, for the list of misses


@dataclass(frozen=True)
class Scan:
    codes: list[str]
    unrecognized: int
    crash: str = ""  # why the log counts as a crash

    @property
    def first(self) -> str:
        return "crash" if self.crash else self.codes[0] if self.codes else "none"


@dataclass
class Tally:
    pos: int = 0  # labelled failures with a code
    hit: int = 0
    neg: int = 0  # healthy logs
    fp: int = 0
    ooc: int = 0
    ooc_ok: int = 0
    failed: int = 0  # every log but a healthy one
    silent: int = 0
    crash: int = 0
    per_label: dict[str, list[int]] = field(default_factory=dict)  # label -> [right, total]
    per_code: dict[str, list[int]] = field(default_factory=dict)  # code(s) -> [right, total]
    misses: list[dict] = field(default_factory=list)

    def line(self) -> str:
        """The figures in the shape of the last line of the labels.yaml corpus's own scorer."""
        return (f"root cause right {self.hit}/{self.pos} = {self.hit / max(self.pos, 1):.1%}; "
                f"healthy logs diagnosed {self.fp}/{self.neg}; "
                f"out-of-catalog failures shown as unrecognized {self.ooc_ok}/{self.ooc}; "
                f"failed runs said 'No error found' {self.silent}/{self.failed}; crashes {self.crash}")


class CorpusError(Exception):
    pass


def load(root: Path) -> tuple[str, list[Case], int]:
    """The layout, the cases and how many rows were skipped (undeterminable)."""
    if (root / "labels.yaml").is_file():
        rows = yaml.safe_load((root / "labels.yaml").read_text(encoding="utf-8")) or []
        cases = []
        for row in rows:
            want = str(row["root"])
            if want == "undeterminable":
                continue
            cases.append(Case(
                file=str(row["file"]), path=root / str(row["file"]), label=want,
                codes=() if want in ("none", "out-of-catalog") else (want,), healthy=want == "none",
                also=tuple(str(a) for a in row.get("also") or ()),
                detail=f"[{row.get('difficulty')}] {str(row.get('key_line', ''))[:100]}"))
        return "labels.yaml", cases, len(rows) - len(cases)
    if (root / "corpus" / "labels.jsonl").is_file():
        cases = []
        for n, text in enumerate((root / "corpus" / "labels.jsonl").read_text(encoding="utf-8").splitlines(), 1):
            if not text.strip():
                continue
            row = json.loads(text)
            if row["mode"] not in GPUALERT:
                raise CorpusError(f"{root}/corpus/labels.jsonl:{n}: class {row['mode']!r} has no entry in GPUALERT")
            cases.append(Case(file=row["log_path"], path=root / row["log_path"], label=row["mode"],
                              codes=GPUALERT[row["mode"]], healthy=False, detail=f"[{row.get('source')}]"))
        return "gpualert", cases, 0
    raise CorpusError(f"{root}: neither labels.yaml nor corpus/labels.jsonl")


def scan(errmap: list[str], path: Path, timeout: float) -> Scan:
    try:
        p = subprocess.run([*errmap, "scan", "--format", "json", str(path)],
                           capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return Scan([], 0, f"no answer in {timeout:g} s")
    if p.returncode not in (0, 1) or "Traceback (most recent call last)" in p.stderr:
        return Scan([], 0, f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
    try:
        doc = json.loads(p.stdout)
        return Scan([str(d["errno"]) for d in doc.get("diagnoses", [])], len(doc.get("unrecognized", [])))
    except (ValueError, KeyError, TypeError) as e:
        return Scan([], 0, f"unreadable JSON: {e}")


def consequences(errmap: list[str]) -> set[str]:
    """The codes errmap's own KB marks as consequences of another failure."""
    p = subprocess.run([*errmap, "list", "--format", "json"], capture_output=True, text=True)
    if p.returncode:
        raise CorpusError(f"{shlex.join(errmap)} list --format json: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return {str(c["errno"]) for c in json.loads(p.stdout) if c["role"] == "consequence"}


def count(table: dict[str, list[int]], key: str, ok: bool) -> None:
    row = table.setdefault(key, [0, 0])
    row[0] += ok
    row[1] += 1


def judge(case: Case, got: Scan, after: set[str], t: Tally) -> None:
    t.crash += bool(got.crash)
    if not case.healthy:
        t.failed += 1
        t.silent += not got.crash and not got.codes and not got.unrecognized
    if case.healthy:
        t.neg += 1
        ok = got.first == "none"
        t.fp += not ok
    elif not case.codes:
        t.ooc += 1
        # an unknown root may still set off a known consequence (1047 after an unknown engine error)
        ok = got.unrecognized > 0 and (got.first == "none" or (got.first in after and got.first in case.also))
        t.ooc_ok += ok
    else:
        t.pos += 1
        ok = got.first in case.codes
        t.hit += ok
        count(t.per_code, "/".join(case.codes), ok)
    count(t.per_label, case.label, ok)
    if not ok:
        t.misses.append({"file": case.file, "label": case.label, "want": list(case.codes) or case.label,
                         "got": got.first, "codes": got.codes, "unrecognized": got.unrecognized,
                         "crash": got.crash, "detail": case.detail})


def report(name: str, layout: str, t: Tally, skipped: int, verbose: bool) -> None:
    right, scored = (sum(col) for col in zip(*t.per_label.values())) if t.per_label else (0, 0)
    print(f"== {name} ({layout}: {scored} logs scored, {skipped} skipped; "
          f"right overall {right}/{scored} = {right / max(scored, 1):.1%})")
    for title, table in (("per label", t.per_label), ("per code", t.per_code)):
        if title == "per code" and table.keys() <= t.per_label.keys():
            continue  # the labels are the codes
        print(f"{title}:")
        for key, (r, n) in sorted(table.items()):
            print(f"  {key:<20} {r:>4}/{n:<4} {r / n:6.1%}")
    if verbose and t.misses:
        print("misses (label -> first code [codes], unrecognized: count, an example):")
        groups: dict[tuple, list[dict]] = {}
        for m in t.misses:
            groups.setdefault((m["label"], m["got"], tuple(m["codes"][:4]), m["unrecognized"] > 0), []).append(m)
        for (label, got, codes, unrec), ms in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
            print(f"  {label} -> {got} {list(codes)}, unrecognized {'yes' if unrec else 'no'}: {len(ms)}"
                  f"  e.g. {ms[0]['file']} {ms[0]['detail']} {ms[0]['crash']}".rstrip())
    print(t.line())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a corpus folder")
    ap.add_argument("--errmap", help="the command that runs errmap (default: errmap on PATH, else this Python's -m errmap)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="logs scanned at once (default: cpu count)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per log before it counts as a crash")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write every figure and miss here")
    ap.add_argument("--verbose", action="store_true", help="list the misses, grouped by what errmap said")
    args = ap.parse_args()
    on_path = shutil.which("errmap")
    errmap = shlex.split(args.errmap) if args.errmap else [on_path] if on_path else [sys.executable, "-m", "errmap"]
    try:
        after = consequences(errmap)
        corpora = [(p, *load(p)) for p in args.paths]
    except (CorpusError, OSError, ValueError, KeyError, yaml.YAMLError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    total = Tally()
    out = []
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        for path, layout, cases, skipped in corpora:
            t = Tally()
            for case, got in zip(cases, pool.map(lambda c: scan(errmap, c.path, args.timeout), cases)):
                judge(case, got, after, t)
                judge(case, got, after, total)
            report(str(path), layout, t, skipped, args.verbose)
            out.append({"path": str(path), "layout": layout, "skipped": skipped, "summary": t.line(), **vars(t)})
    if len(corpora) > 1:
        print(f"== all {len(corpora)} corpora")
        print(total.line())
    if args.json:
        doc = {"errmap": shlex.join(errmap), "consequences": sorted(after), "gpualert_map": GPUALERT,
               "corpora": out, "total": {"summary": total.line(), **{k: v for k, v in vars(total).items() if k != "misses"}}}
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    sys.exit(1 if total.crash else 0)


if __name__ == "__main__":
    main()
