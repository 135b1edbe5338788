"""Growth of `errmap scan` with hostile input: time, peak RSS and JSON size as the input grows.

    python bench/scale.py                      # every case at its default sizes
    python bench/scale.py --case modules --sizes 5000 20000

Each case generates a log (or a folder of logs) of n units: distinct 1 MB error lines, distinct
unrecognized tracebacks, distinct `No module named` lines, or rank logs with the same error. Time
linear in n shows as a constant time per unit; memory should stay flat.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def big_lines(d: Path, n: int) -> list[str]:
    p = d / "big.log"
    with open(p, "wb") as f:
        for i in range(n):
            word = "".join("abcdefghij"[int(c)] for c in str(i)).encode()  # distinct after digits are masked
            f.write(b"ValueError: bad value " + (word + b" ") * ((1 << 20) // (len(word) + 1)) + b"\n")
    return [str(p)]


def tracebacks(d: Path, n: int) -> list[str]:
    p = d / "tb.log"
    with open(p, "w") as f:
        for i in range(n):
            word = "".join("abcdefghij"[int(c)] for c in str(i))
            f.write(f'Traceback (most recent call last):\n  File "job{i}.py", line {i}, in run_{word}\n'
                    f"    step_{word}()\nStrange{word.title()}Error: state {word} of worker {word} is wrong\n")
    return [str(p)]


def modules(d: Path, n: int) -> list[str]:
    p = d / "mod.log"
    with open(p, "w") as f:
        for i in range(n):
            f.write(f"ModuleNotFoundError: No module named 'pkg_{i}'\n")
    return [str(p)]


def rank_logs(d: Path, n: int) -> list[str]:
    (d / "ranks").mkdir()
    for i in range(n):
        (d / "ranks" / f"rank{i}.log").write_text(
            f"[rank{i}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            f"GPU 0 has a total capacity of 79.11 GiB of which 1.50 GiB is free.\n")
    return [str(d / "ranks")]


CASES = {"big_lines": (big_lines, [25, 50, 100]), "tracebacks": (tracebacks, [25_000, 50_000, 100_000]),
         "modules": (modules, [2500, 5000, 10_000, 20_000]), "rank_logs": (rank_logs, [2500, 5000, 10_000])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=list(CASES), action="append")
    ap.add_argument("--sizes", type=int, nargs="*")
    ap.add_argument("--errmap", default=f"{sys.executable} -m errmap", help="the command to measure")
    args = ap.parse_args()
    print(f"{'case':<11} {'n':>8} {'wall s':>8} {'µs/unit':>9} {'peak MB':>8} {'JSON MB':>8} exit")
    for name in args.case or list(CASES):
        make, sizes = CASES[name]
        for n in args.sizes or sizes:
            with tempfile.TemporaryDirectory() as tmp:
                paths = make(Path(tmp), n)
                # one child per measurement, so each peak is that scan's own
                code = ("import resource,subprocess,sys,time;t=time.perf_counter();"
                        "p=subprocess.run(sys.argv[2:]+['scan','--format','json',*sys.argv[1].split('\\0')],capture_output=True);"
                        "print(time.perf_counter()-t,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,len(p.stdout),p.returncode)")
                out = subprocess.run([sys.executable, "-c", code, "\0".join(paths), *args.errmap.split()],
                                     capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
                wall, rss, size, rc = out.stdout.split()
                wall = float(wall)
                print(f"{name:<11} {n:>8} {wall:>8.2f} {wall / n * 1e6:>9.0f} {int(rss) / 1024:>8.0f} "
                      f"{int(size) / 1e6:>8.2f} {rc}", flush=True)


if __name__ == "__main__":
    main()
