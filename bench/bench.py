"""errmap benchmark: throughput against ripgrep, memory, growth per GB, watch latency, start-up.

    python bench/bench.py                 # 1, 2 and 4 GB logs (needs ~4 GB free disk at a time)
    python bench/bench.py --sizes 0.25    # a quick run

Four logs are built from the project's own fixtures, with one real error line from fixtures/<errno>/
every so many lines:
- near-miss: every line of fixtures/clean/ alike (benign warnings full of the words anchors look
  for), an error every 50,000 lines;
- near-miss-stamped: the same with each line stamped with its own time, as a logger would, so that a line comes again
  only by its shape (a scanner remembers the lines that gave nothing with their digits read as 0);
- near-miss-unique: the stamped log with each line's Ray prefix naming a task of its own (a hex name), so that no
  line comes again even by its shape: the scanner's memory never helps;
- realistic: the routine lines of those logs (verl/vLLM/Ray/NCCL INFO lines, tqdm bars, HF and verl
  metrics, Ray's ANSI colours), an error every 200,000 lines.
Each is scanned by `rg -F -f <errmap's literals>` and by errmap (stage one with the anchors' supersets,
with 1 process and with every core, and with the literals alone), alternately, `--repeat` times (the
median is reported), so on a shared machine the ratios compare like with like. Results are printed as a
table and written to bench/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from errmap.kb import load as kbmod  # noqa: E402
from errmap.scan.matcher import Matcher  # noqa: E402
from errmap.scan.scanner import scan_chunks  # noqa: E402

GB = 1 << 30
PROFILES = {"near-miss": 50_000, "near-miss-stamped": 50_000, "near-miss-unique": 50_000,
            "realistic": 200_000}  # one error line per this many lines
# Routine output: INFO records, progress bars, step metrics.
ROUTINE = re.compile(rb"INFO|it/s|s/it|\d+/\d+ \[|loss|reward|grad_norm|step|throughput")
RG_REGEX_CAP = 120  # seconds
USER_KB = ROOT / "tests" / "data" / "userkb"


def _lines(folder: Path) -> list[bytes]:
    out: list[bytes] = []
    for f in sorted(folder.glob("*.log")):
        out += f.read_bytes().splitlines(keepends=True)
    return out


def error_lines() -> list[bytes]:
    """Lines of the fixtures that the KB diagnoses: real error lines."""
    m = Matcher(kbmod.load())
    found: set[bytes] = set()
    for folder in sorted((ROOT / "fixtures").glob("1*")):
        for f in sorted(folder.glob("*.log")):
            data = f.read_bytes()
            lines = data.splitlines(keepends=True)
            for ev in scan_chunks(m, str(f), [data]):
                if hasattr(ev, "entry") and 0 < ev.line.lineno <= len(lines):
                    found.add(lines[ev.line.lineno - 1])
    return sorted(found)


def make_log(path: Path, size: int, seed: int = 7, profile: str = "near-miss") -> int:
    """Write a log of about `size` bytes; return the number of error lines in it."""
    rng = random.Random(seed)
    healthy = _lines(ROOT / "fixtures" / "clean") or [b"step 1 loss 0.5\n"]
    if profile == "realistic":
        healthy = [line for line in healthy if ROUTINE.search(line)]
    every = PROFILES[profile]
    errors = error_lines()
    block = bytearray()
    n_errors = n = 0
    while len(block) < 16 << 20:
        for _ in range(every):
            n += 1
            if profile in ("near-miss-stamped", "near-miss-unique"):  # each line its own time, as a logger's
                block += b"2026-12-04 %02d:%02d:%02d.%06d " % (n // 3600 % 24, n // 60 % 60, n % 60, n)
            if profile == "near-miss-unique":  # and Ray's prefix of a task of its own: not even its shape comes again
                block += b"(task_%08x pid=%d) " % (rng.getrandbits(32), 1000 + n % 64)
            block += healthy[rng.randrange(len(healthy))]
        block += errors[rng.randrange(len(errors))]
        n_errors += 1
    written = errs = 0
    with open(path, "wb") as f:
        while written < size:
            f.write(block)
            written += len(block)
            errs += n_errors
    return errs


def timed(cmd: list[str], env: dict[str, str] | None = None, cap: float | None = None) -> tuple[float | None, int, float]:
    """Wall seconds, peak RSS in KB and CPU seconds (user + system, children included), via GNU time; (None, 0, 0)
    when it ran past `cap` seconds."""
    with tempfile.NamedTemporaryFile("r") as t:
        t0 = time.perf_counter()
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%M %U %S", "-o", t.name, *cmd], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            proc.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the measured command too, not only GNU time
            proc.wait()
            return None, 0, 0.0
        wall = time.perf_counter() - t0
        rss, user, system = t.read().strip().splitlines()[-1].split()
    return wall, int(rss), float(user) + float(system)


def rg_patterns(folder: Path) -> tuple[Path, int, int]:
    """The KB's anchor patterns that ripgrep's regex engine accepts, one per line.

    Named groups become plain groups (rg joins the patterns into one, where names would clash).
    """
    pats = [re.sub(r"\(\?P<\w+>", "(", a.regex) for e in kbmod.load() for a in e.anchors]
    ok = []
    for p in pats:
        probe = subprocess.run(["rg", "-q", "-e", p, "/dev/null"], capture_output=True)
        if probe.returncode in (0, 1):  # 2 means the pattern did not compile
            ok.append(p)
    f = folder / "anchors.rg"
    f.write_text("\n".join(ok) + "\n")
    return f, len(ok), len(pats)


def rg_literals(folder: Path) -> Path:
    """The literals errmap's stage one looks for: what ripgrep searches at its best (-F)."""
    f = folder / "literals.rg"
    f.write_bytes(b"\n".join(Matcher(kbmod.load()).literals) + b"\n")
    return f


def candidate_lines_per_gb(log: Path, sample: int = 64 << 20) -> int:
    """Lines with a stage-one hit (those that reach Python), per GB, over the log's first 64 MB."""
    m = Matcher(kbmod.load())
    with open(log, "rb") as f:
        data = f.read(sample)
    data = data[: data.rfind(b"\n") + 1]
    starts = {data.rfind(b"\n", 0, end) for _, end in m.prefilter.hits(data)}
    return round(len(starts) * GB / len(data))


def watch_latency(n: int = 1000) -> dict[str, float]:
    """Seconds from an error line written into a pipe to its diagnosis read back (jsonl)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "errmap", "watch", "--format", "jsonl", "--kb", str(USER_KB)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, bufsize=0,
    )
    lat = []
    proc.stdin.write(b"warm-up line\n" * 10)
    for i in range(n):
        proc.stdin.write(b"step %d loss 0.1\n" % i * 20)
        t0 = time.perf_counter()
        proc.stdin.write(b"errmap-test-marker %d\n" % i)
        line = proc.stdout.readline()
        lat.append(time.perf_counter() - t0)
        assert b"9001" in line, line
    proc.stdin.close()
    proc.wait()
    lat.sort()
    return {"p50_ms": 1000 * statistics.median(lat), "p99_ms": 1000 * lat[int(0.99 * len(lat)) - 1], "n": n}


def startup(cmd: list[str], runs: int = 10) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4], help="log sizes in GB")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the logs are written")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command, alternating; the median counts")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, os.cpu_count() or 1], help="errmap -j values")
    ap.add_argument("--no-rg-regex", action="store_true", help="skip rg with the full anchor regexes")
    ap.add_argument("--no-literals-run", action="store_true", help="skip errmap with the literal stage one alone")
    args = ap.parse_args()
    if not shutil.which("rg"):
        sys.exit("ripgrep (rg) is needed: apt-get install ripgrep")
    errmap = [sys.executable, "-m", "errmap"]
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="errmap-bench-"))
    patterns, n_ok, n_all = rg_patterns(work)
    literals = rg_literals(work)
    rows = []
    runs = [("hyperscan", j) for j in dict.fromkeys(args.jobs)] + [("hyperscan-literals", 1)] * (not args.no_literals_run)
    try:
        for gb in args.sizes:
            for profile in PROFILES:
                log = work / f"train-{profile}-{gb:g}GB.log"
                errs = make_log(log, int(gb * GB), profile=profile)
                size = log.stat().st_size
                subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL)  # page cache warm for both
                rg_times, em_times = [], {run: [] for run in runs}
                for _ in range(args.repeat):  # alternating, so a change in the machine's load hits all alike
                    rg_times.append(timed(["rg", "-a", "-n", "-F", "-f", str(literals), str(log)]))
                    for engine, jobs in runs:
                        em_times[engine, jobs].append(timed([*errmap, "scan", "-j", str(jobs), "--format", "json", str(log)],
                                                            {"ERRMAP_PREFILTER": engine}))
                rg_s = statistics.median(t for t, _, _ in rg_times)
                rg_cpu = statistics.median(c for _, _, c in rg_times)
                row = {"profile": profile, "size_gb": round(size / GB, 3), "error_lines": errs,
                       "candidate_lines_per_gb": candidate_lines_per_gb(log), "repeat": args.repeat,
                       "load_average": round(os.getloadavg()[0], 1),  # the machine's, other work included
                       "rg_literals_s": round(rg_s, 2), "rg_cpu_s": round(rg_cpu, 2),
                       "rg_peak_mb": round(max(kb for _, kb, _ in rg_times) / 1024),
                       "errmap": []}
                if gb == args.sizes[0] and profile == "near-miss" and not args.no_rg_regex:  # full regexes, capped
                    rx_s, _, _ = timed(["rg", "-a", "-n", "-f", str(patterns), str(log)], cap=RG_REGEX_CAP)
                    row["rg_regex_s"] = round(rx_s, 2) if rx_s is not None else f"over {RG_REGEX_CAP} s"
                for (engine, jobs), times in em_times.items():
                    em_s = statistics.median(t for t, _, _ in times)
                    em_cpu = statistics.median(c for _, _, c in times)
                    row["errmap"].append({
                        "engine": engine, "jobs": jobs, "errmap_s": round(em_s, 2),
                        "ratio_to_rg_literals": round(em_s / rg_s, 2),
                        "ratios": [round(t / r, 2) for (t, _, _), (r, _, _) in zip(times, rg_times)],
                        "cpu_s": round(em_cpu, 2), "cpu_ratio_to_rg": round(em_cpu / rg_cpu, 2),
                        "mb_per_s": round(size / em_s / 1e6), "s_per_gb": round(em_s / (size / GB), 2),
                        "peak_mb": round(max(kb for _, kb, _ in times) / 1024),
                    })
                rows.append(row)
                print(json.dumps(row), flush=True)
                log.unlink()
        small = work / "small.log"
        small.write_bytes(b"step 1 loss 0.5\n" * 1000)
        result = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}",
            "rg_patterns": f"{n_ok} of {n_all} anchor patterns (the rest use syntax ripgrep's engine lacks)",
            "scan": rows,
            "watch_latency": watch_latency(),
            "startup_s": {
                "explain 1001": round(startup([*errmap, "explain", "1001"]), 3),
                "scan small.log": round(startup([*errmap, "scan", str(small)]), 3),
            },
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"machine: {result['machine']}")
    print(f"{'log':>17} {'size GB':>8} {'cand/GB':>8} {'engine':>18} {'jobs':>4} {'errmap s':>9} {'rg -F s':>8} {'ratio':>6} {'MB/s':>6} {'s/GB':>6} {'peak MB':>8}")
    for r in rows:
        for e in r["errmap"]:
            print(f"{r['profile']:>17} {r['size_gb']:>8} {r['candidate_lines_per_gb']:>8} {e['engine']:>18} {e['jobs']:>4} {e['errmap_s']:>9} {r['rg_literals_s']:>8} {e['ratio_to_rg_literals']:>6} {e['mb_per_s']:>6} {e['s_per_gb']:>6} {e['peak_mb']:>8}")
    print(f"rg -f with {result['rg_patterns']}, on the first size: {rows[0].get('rg_regex_s')}")
    w = result["watch_latency"]
    print(f"watch latency over {w['n']} lines: p50 {w['p50_ms']:.1f} ms, p99 {w['p99_ms']:.1f} ms")
    for k, v in result["startup_s"].items():
        print(f"start-up, errmap {k}: {v:.3f} s")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
