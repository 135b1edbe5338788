"""The training settings of a run: from the overrides a user gives `errmap doctor` after `--`, or
found in the log (verl echoes its Hydra overrides `data.train_files=...` in launch scripts and
prints its resolved config as a Python dict: `'train_files': '~/data/gsm8k/train.parquet'`).

Only used with --probe or by doctor: the default scan never pays for it.
"""

from __future__ import annotations

import regex

from errmap.probes.base import probe, via

# top-level groups of verl's ppo_trainer.yaml
GROUPS = ("data", "actor_rollout_ref", "critic", "reward_model", "trainer", "algorithm", "custom_reward_function", "ray_init", "ray_kwargs")

# Hydra override on a command line or in an echoed script: key.sub=value, optionally +key / ++key
OVERRIDE = regex.compile(
    rb"(?<![\w.+-])(\+{0,2}(?:" + b"|".join(g.encode() for g in GROUPS) + rb")(?:\.[\w]+)+)=('[^']*'|\"[^\"]*\"|\[[^\]\s]*\]|[^\s\\'\"]+)"
)

# leaves of verl's printed config that name one setting unambiguously
LEAVES = {
    "train_files": "data.train_files",
    "val_files": "data.val_files",
    "prompt_key": "data.prompt_key",
    "reward_fn_key": "data.reward_fn_key",
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "n_gpus_per_node": "trainer.n_gpus_per_node",
    "nnodes": "trainer.nnodes",
    "max_num_batched_tokens": "actor_rollout_ref.rollout.max_num_batched_tokens",
    "enable_chunked_prefill": "actor_rollout_ref.rollout.enable_chunked_prefill",
    "max_model_len": "actor_rollout_ref.rollout.max_model_len",
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
}
PRINTED = regex.compile(
    rb"'(" + b"|".join(k.encode() for k in LEAVES) + rb")': ('[^']*'|\[[^\]]*\]|[\w.+-]+)"
)
MAX_SETTINGS = 500


def _clean(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value


def parse_overrides(args: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`key=value` arguments (Hydra style, + and ++ kept off the key) as a flat dict."""
    out: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key:
            out[key.lstrip("+")] = _clean(value)
    return out


def all_files(value: str | None) -> list[str]:
    """Every file of a data.train_files value: a path, or a list like ['a.parquet', 'b.parquet']."""
    if not value:
        return []
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        return [c for v in value[1:-1].split(",") if (c := _clean(v))]
    return [c] if (c := _clean(value)) else []


def first_file(value: str | None) -> str | None:
    """The first file of a data.train_files value."""
    return next(iter(all_files(value)), None)


class ConfigSniffer:
    """Collects settings from log bytes as they stream past; cheap bytes-level search per chunk."""

    def __init__(self) -> None:
        self.settings: dict[str, str] = {}
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        if len(self.settings) >= MAX_SETTINGS:
            return
        data = self._tail + chunk
        cut = data.rfind(b"\n") + 1
        block, self._tail = (data[:cut], data[cut:][-4096:]) if cut else (b"", data[-4096:])
        self._scan(block)

    def finish(self) -> None:
        self._scan(self._tail)
        self._tail = b""

    def _scan(self, block: bytes) -> None:
        if not block:
            return
        if b"=" in block:
            for m in OVERRIDE.finditer(block):
                self.settings.setdefault(m[1].decode(errors="replace").lstrip("+"), _clean(m[2].decode(errors="replace")))
        if b"': " in block:
            for m in PRINTED.finditer(block):
                value = _clean(m[2].decode(errors="replace"))
                if value not in ("None", "null"):
                    self.settings.setdefault(LEAVES[m[1].decode()], value)

    def wrap(self, chunks):
        for chunk in chunks:
            self.feed(chunk)
            yield chunk
        self.finish()


@probe("run.config", timeout=2, uses=("config",))
def run_config(ctx):
    """The run's settings: overrides after `errmap doctor --`, or those found in the log."""
    return via(dict(ctx.config), "command line" if ctx.config else "none given or found")
