"""Versions: which releases of the run's software a log names, and whether a fix step or a fix release holds for them.

The scanner (errmap/scan/scanner.py) reads the lines holding one of LITERALS (start-up banners, pip's output, environment
reports people paste) and the package folders of traceback frames; `errmap scan --probe` reads the installed
packages instead (probes/versions.py). A fix step names the releases it holds for (`versions:` in the KB, a
specifier per package such as "<0.6" or ">=0.3,<0.6"); a fix link names the first release that ships it
(`released_in: "vllm 0.6.5"`).
"""

from __future__ import annotations

from functools import lru_cache

import regex

# Package names as pip spells them, normalised (lower case, "_" and "." as "-"); the names steps and links use.
KNOWN = ("verl", "vllm", "sglang", "trl", "openrlhf", "llamafactory", "deepspeed", "transformers", "accelerate",
         "torch", "flash-attn", "ray", "triton", "datasets", "peft", "megatron-core", "lmdeploy")

# The lines that name a release: vLLM's engine and server banners (vllm/engine/llm_engine.py, v1/engine/core.py,
# entrypoints/openai/api_server.py), DeepSpeed's engine banner (deepspeed/runtime/engine.py "DeepSpeed info:
# version=..."), pip ("Successfully installed a-1.0 b-2.0", "Requirement already satisfied: a in /path (1.0)"),
# PyTorch's and vLLM's collect_env ("PyTorch version: 2.4.0+cu121", "vLLM Version: 0.6.3", "[pip3] torch==2.4.0"),
# and transformers' `transformers env` ("- `transformers` version: 4.46.3").
BANNERS = {b"LLM engine (v": "vllm", b"vLLM API server version ": "vllm", b"vLLM Version: ": "vllm",
           b"DeepSpeed info: version=": "deepspeed", b"PyTorch version: ": "torch"}  # literals of one package's release
LITERALS = (*BANNERS, b"Successfully installed ", b"Requirement already satisfied: ", b"[pip3] ", b"[pip] ", b"[conda] ",
            b"` version: ")
_V = r"(?P<version>\d+(?:\.\d+)+(?:[.-]?(?:post|dev|rc|a|b)\d*)*(?:\+[\w.]+)?)"
_LINE = regex.compile("|".join([
    r"LLM engine \(v" + _V + r"\)(?P<vllm>)",
    r"vLLM API server version " + _V + r"(?P<vllm>)",
    r"vLLM Version: " + _V + r"(?P<vllm>)",
    r"DeepSpeed info: version=" + _V + r"(?P<deepspeed>)",
    r"PyTorch version: " + _V + r"(?P<torch>)",
    r"Requirement already satisfied: (?P<package>[\w.-]+)(?:[=<>!~]=?[\w.*]+)? in \S+ \(" + _V + r"\)",
    r"\[(?:pip3?|conda)\] (?P<package>[\w.-]+)(?:==| +)" + _V,
    r"- `?(?P<package>[\w.-]+)`? version: " + _V,
]))
_INSTALLED = regex.compile(r"Successfully installed ((?:[\w.-]+-\d[\w.+-]* ?)+)")
_PAIR = regex.compile(r"([\w.]+(?:-[A-Za-z_][\w.]*)*)-(\d[\w.+]*)")
# A traceback frame's path with the release in a folder's name: an egg ("vllm-0.6.3-py3.10-linux-x86_64.egg/"),
# a versioned checkout or environment folder ("verl-0.4.1/verl/").
_FOLDER = regex.compile(r"[/\\](?P<package>[A-Za-z][\w.]*?)-" + _V + r"(?:-py\d[\w.-]*)?(?:\.egg)?[/\\]")


_SEPARATORS = regex.compile(r"[-_.]+")


def normal(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()


def in_line(text: str) -> list[tuple[str, str]]:
    """The (package, version) pairs a line names, for the packages errmap knows."""
    found: list[tuple[str, str]] = []
    if (m := _INSTALLED.search(text)) is not None:
        found += [(normal(p), v) for p, v in _PAIR.findall(m[1])]
    elif (m := _LINE.search(text)) is not None:
        package = m["package"] or next(k for k in ("vllm", "deepspeed", "torch") if m[k] is not None)
        found.append((normal(package), m["version"]))
    return [(p, v) for p, v in found if p in KNOWN]


@lru_cache(maxsize=4096)  # a traceback's paths recur in every traceback through them
def in_path(path: str) -> tuple[str, str] | None:
    """The (package, version) that a frame's path names in a folder, for a package errmap knows."""
    m = _FOLDER.search(path)
    return (normal(m["package"]), m["version"]) if m is not None and normal(m["package"]) in KNOWN else None


def parse(version: str) -> tuple:
    """A release as a comparable tuple: its numbers, then a pre-release (rc, a, b, dev) before the release itself and
    a post-release after it; a local part (+cu121) is left out."""
    version = version.split("+", 1)[0].lower()
    m = regex.match(r"v?(\d+(?:\.\d+)*)(?:[.-]?(post|dev|rc|a|b|alpha|beta)(\d*))?", version)
    if m is None:
        return ()
    nums = tuple(int(x) for x in m[1].split("."))
    nums += (0,) * (4 - len(nums))
    tag = {"post": 1, None: 0}.get(m[2], -1)
    return nums + (tag, int(m[3] or 0))


_CLAUSE = regex.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\S+?)\s*$")


def valid(spec: str) -> bool:
    """Whether a specifier is one this module reads: clauses `>=1.2`, `<0.6`, `==0.5.0`, ... joined by commas; empty
    means every release."""
    return all(_CLAUSE.match(c) and parse(_CLAUSE.match(c)[2]) for c in spec.split(",")) if spec.strip() else True


def holds(spec: str, version: str) -> bool:
    """Whether a release satisfies a specifier (every clause). `==0.5` holds for 0.5.x, as a release line."""
    have = parse(version)
    for clause in filter(str.strip, spec.split(",")):
        op, want = _CLAUSE.match(clause).groups()
        bound = parse(want)
        if op in ("==", "!="):
            n = len(want.split("+")[0].split("."))
            same = have[:n] == bound[:n] if "rc" not in want and "post" not in want else have == bound
            if same != (op == "=="):
                return False
        elif not {">=": have >= bound, "<=": have <= bound, ">": have > bound, "<": have < bound}[op]:
            return False
    return True


def release(text: str) -> tuple[str, str] | None:
    """A link's `released_in` ("vllm 0.6.5") as (package, version); None where no release holds it yet."""
    parts = text.split()
    return (normal(parts[0]), parts[1]) if len(parts) == 2 and parse(parts[1]) else None
