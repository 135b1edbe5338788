"""File probes: the data file (parquet or JSON lines) and the model and checkpoint folders a run reads.

Data is read with pyarrow, schema first (no data), and only the one column a probe needs.
The model folder is read as plain JSON: no tokenizer library is loaded.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

from errmap.probes.base import Unknown, probe, via

LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "tokenizer_config.json", "spiece.model")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
MAX_SOURCES = 50


DATA_SUFFIXES = (".parquet", ".json", ".jsonl", ".arrow", ".csv")


def _data_path(ctx) -> Path:
    """The data file the log's error names (a captured path to a data file), else --data or
    data.train_files found in the log."""
    named = ctx.capture("path", "file")
    raw = named if named and named.strip("'\"").endswith(DATA_SUFFIXES) else ctx.data or named
    if not raw:
        raise Unknown("no data file: none named in the log (data.train_files=...) and none given with --data")
    return Path(os.path.expandvars(str(raw).strip("'\""))).expanduser()


JSON_SUFFIXES = (".jsonl", ".json")
JSON_BLOCK = 16 << 20  # bytes pyarrow reads of a JSON lines file at a time; the schema comes from the first


class _Table:
    """A data file read with pyarrow: parquet (schema from the footer) or JSON lines (schema from
    the first block, as `datasets` infers it). Each method raises Unknown with the reason."""

    def __init__(self, path: Path):
        self.path = path
        self.json = path.name.endswith(JSON_SUFFIXES)
        self.kind = "JSON lines" if self.json else "parquet"

    def _fail(self, exc: Exception):
        hint = " (pyarrow reads JSON lines: one object per line, not one JSON array)" if self.json else ""
        return Unknown(f"not a readable {self.kind} file: {self.path}: {exc}{hint}"[:300])

    def _open_json(self):
        import pyarrow.json as pj

        return pj.open_json(self.path, read_options=pj.ReadOptions(block_size=JSON_BLOCK))

    def schema(self):
        try:
            if self.json:
                return self._open_json().schema
            import pyarrow.parquet as pq

            return pq.read_schema(self.path)
        except Exception as exc:
            raise self._fail(exc) from None

    def column(self, key: str, batch_size: int):
        """The values of one column, a list per batch."""
        if key not in self.schema().names:
            raise Unknown(f"{self.path} has no {key} column")
        try:
            if self.json:
                for batch in self._open_json():
                    yield batch.column(key).to_pylist()
                return
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(self.path).iter_batches(columns=[key], batch_size=batch_size):
                yield batch.column(0).to_pylist()
        except Unknown:
            raise
        except Exception as exc:
            raise self._fail(exc) from None


def _table(ctx) -> _Table:
    """The data file as a table; Unknown with the reason when it cannot be read."""
    path = _data_path(ctx)
    if not path.exists():
        raise Unknown(f"file not found: {path}")
    if path.is_dir():
        raise Unknown(f"{path} is a directory, not a data file")
    if not path.is_file():
        raise Unknown(f"{path} is not a regular file (a FIFO or device); not read")
    if path.name.endswith((".arrow", ".csv")):
        raise Unknown(f"{path}: the probes read parquet and JSON lines files only")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise Unknown("pyarrow not installed") from None
    return _Table(path)


@probe("data.file", timeout=5, uses=("data", "captures"))
def data_file(ctx):
    """Whether the data file exists, is a directory, a git-lfs pointer, a parquet file (magic bytes); its `format`:
    parquet, or json for a .json/.jsonl file that opens with an object or an array."""
    path = _data_path(ctx)
    out: dict[str, Any] = {"path": str(path), "exists": path.exists()}
    if not path.exists():
        out.update(parquet=None)
        return via(out, "filesystem")
    if path.is_dir():
        out.update(is_dir=True, parquet=False)
        return via(out, "filesystem")
    if not path.is_file():  # a FIFO or device: opening it would wait for a writer
        out.update(regular=False, parquet=False)
        return via(out, "filesystem")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(len(LFS_POINTER))
        start = (head + f.read(4096)).lstrip()[:1]
        tail = b""
        if size >= 8:
            f.seek(size - 4)
            tail = f.read(4)
    parquet = head[:4] == b"PAR1" and tail == b"PAR1"
    is_json = path.name.lower().endswith(JSON_SUFFIXES) and start in (b"{", b"[")
    out.update(size=size, lfs_pointer=head.startswith(LFS_POINTER), parquet=parquet,
               format="parquet" if parquet else "json" if is_json else None)
    return via(out, "magic bytes")


@probe("data.columns", timeout=15, uses=("data", "captures"))
def data_columns(ctx):
    """Column names and their Arrow types: from the parquet footer (no rows are read), or as
    pyarrow infers them from the first block of a JSON lines file."""
    t = _table(ctx)
    return via({f.name: str(f.type) for f in t.schema()}, f"pyarrow schema ({t.kind})")


def chat_type(arrow_type) -> bool:
    """list<struct<...role..., ...content...>>: a list of chat messages as verl's RLHFDataset wants."""
    import pyarrow as pa

    if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        return False
    item = arrow_type.value_type
    if not pa.types.is_struct(item):
        return False
    names = {item.field(i).name for i in range(item.num_fields)}
    return {"role", "content"} <= names


@probe("data.prompt_format", timeout=15, uses=("data", "captures", "config"))
def data_prompt_format(ctx):
    """Whether the prompt column (data.prompt_key) holds lists of {role, content} chat messages."""
    table = _table(ctx)
    key = ctx.setting("data.prompt_key", "prompt")
    schema = table.schema()
    if key not in schema.names:
        return via({"column": key, "present": False, "chat": False}, "pyarrow schema")
    t = schema.field(key).type
    return via({"column": key, "present": True, "type": str(t), "chat": chat_type(t)}, "pyarrow schema")


@probe("data.data_source", timeout=30, uses=("data", "captures", "config"))
def data_data_source(ctx):
    """Distinct values of the data_source column (data.reward_fn_key), the first 50."""
    table = _table(ctx)
    key = ctx.setting("data.reward_fn_key", "data_source")
    seen: list[str] = []
    for values in table.column(key, batch_size=65536):
        for value in values:
            if value not in seen:
                seen.append(value)
                if len(seen) >= MAX_SOURCES:
                    return via(seen, "pyarrow (first 50 distinct)")
    return via(seen, "pyarrow")


@probe("data.dataset_info", timeout=5, uses=("data", "captures"))
def data_dataset_info(ctx):
    """LLaMA-Factory's entry for the data file in the dataset_info.json beside it (its `formatting` and the `columns`
    that rename the defaults; src/llamafactory/data/parser.py)."""
    path = _data_path(ctx)
    info = path.parent / "dataset_info.json"
    if not info.is_file():
        raise Unknown(f"no dataset_info.json beside {path}")
    for name, entry in _read_json(info).items():
        if isinstance(entry, dict) and entry.get("file_name") in (path.name, str(path)):
            return via({"name": name, "formatting": entry.get("formatting", "alpaca"), "columns": entry.get("columns", {})},
                       str(info))
    raise Unknown(f"{info} has no entry whose file_name is {path.name}")


# ---------------------------------------------------------------- model folder


def _model_dir(ctx) -> Path:
    raw = ctx.model or ctx.capture("model", "model_path", "path")
    if not raw:
        raise Unknown("no model folder: none named in the log (actor_rollout_ref.model.path=...) and none given with --model")
    path = Path(os.path.expandvars(str(raw).strip("'\""))).expanduser()
    if path.is_file():
        path = path.parent
    return path


JSON_LIMIT = 64 << 20  # a tokenizer.json is tens of MB; a config much larger is not one


def _read_json(path: Path) -> dict:
    try:
        if not path.is_file():
            raise Unknown(f"cannot read {path}: not a regular file")
        if (size := path.stat().st_size) > JSON_LIMIT:
            raise Unknown(f"{path} is {size:,} bytes, more than a model's JSON file holds; not read")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Unknown(f"cannot read {path}: {exc}"[:300]) from None
    if not isinstance(data, dict):
        raise Unknown(f"{path} is not a JSON object")
    return data


@probe("model.files", timeout=5, uses=("model", "captures"))
def model_files(ctx):
    """config.json, tokenizer files and weights in the model folder (a hub id is not a local folder)."""
    path = _model_dir(ctx)
    if not path.is_dir():
        return via({"path": str(path), "exists": False, "config": None, "tokenizer": None}, "filesystem")
    names = sorted(p.name for p in path.iterdir())
    tok = [n for n in TOKENIZER_FILES if n in names]
    weights = [n for n in names if n.endswith(WEIGHT_SUFFIXES)]
    return via({"path": str(path), "exists": True, "config": "config.json" in names,
                "tokenizer": any(n in tok for n in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")),
                "tokenizer_files": tok, "weights": len(weights)}, "filesystem")


@probe("model.chat_template", timeout=5, uses=("model", "captures"))
def model_chat_template(ctx):
    """Whether the tokenizer carries a chat template (tokenizer_config.json or chat_template.jinja/.json)."""
    path = _model_dir(ctx)
    if not path.is_dir():
        raise Unknown(f"model folder not found: {path}")
    for name in ("chat_template.jinja", "chat_template.json"):
        if (path / name).is_file():
            return via(True, name)
    cfg = path / "tokenizer_config.json"
    if not cfg.is_file():
        raise Unknown(f"{path} has no tokenizer_config.json")
    return via(bool(_read_json(cfg).get("chat_template")), "tokenizer_config.json")


def tokenizer_size(path: Path) -> tuple[int, str]:
    """One more than the highest token id the tokenizer can produce, from its JSON files."""
    ids: list[int] = []
    tj = path / "tokenizer.json"
    if tj.is_file():
        data = _read_json(tj)
        vocab = (data.get("model") or {}).get("vocab")
        if isinstance(vocab, dict) and vocab:
            ids.append(max(vocab.values()))
        elif isinstance(vocab, list) and vocab:
            ids.append(len(vocab) - 1)
        ids += [t["id"] for t in data.get("added_tokens") or [] if isinstance(t, dict) and "id" in t]
        how = "tokenizer.json"
    elif (path / "vocab.json").is_file():
        vocab = _read_json(path / "vocab.json")
        ids.append(max(vocab.values()) if vocab else -1)
        how = "vocab.json"
    else:
        raise Unknown(f"{path} has no tokenizer.json or vocab.json to count the vocabulary from")
    cfg = path / "tokenizer_config.json"
    if cfg.is_file():
        decoder = _read_json(cfg).get("added_tokens_decoder") or {}
        ids += [int(k) for k in decoder if str(k).isdigit()]
    added = path / "added_tokens.json"
    if added.is_file():
        ids += [v for v in _read_json(added).values() if isinstance(v, int)]
    return max(ids) + 1, how


@probe("model.vocab", timeout=20, uses=("model", "captures"))
def model_vocab(ctx):
    """The tokenizer's size against the model's vocab_size (rows of its embedding)."""
    path = _model_dir(ctx)
    if not path.is_dir():
        raise Unknown(f"model folder not found: {path}")
    if not (path / "config.json").is_file():
        raise Unknown(f"{path} has no config.json")
    cfg = _read_json(path / "config.json")
    model_vocab = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    if not isinstance(model_vocab, int):
        raise Unknown("config.json has no vocab_size")
    size, how = tokenizer_size(path)
    return via({"model_vocab": model_vocab, "tokenizer_vocab": size, "fits": size <= model_vocab}, f"config.json and {how}")


CKPT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".distcp", ".index.json")


_SHARD = re.compile(r"world_size_(\d+)_rank_\d+")


@probe("ckpt.files", timeout=5, uses=("captures",))
def ckpt_files(ctx):
    """How many checkpoint files (weights, shards) the checkpoint folder named in the log holds, two
    levels deep (up to 1000), and the world sizes its shards were saved with. Numbers only: a log
    line naming any folder never has its file names printed."""
    raw = ctx.capture("ckpt", "checkpoint", "dir", "path")
    if not raw:
        raise Unknown("the log names no checkpoint folder")
    path = Path(os.path.expandvars(str(raw).strip("'\""))).expanduser()
    named = None
    if path.is_file() or (not path.exists() and path.suffix):
        named, path = path.name, path.parent  # the log names a file: look at its folder
    if not path.is_dir():
        return via({"path": str(path), "exists": False, "files": 0, "world_sizes": [], "named": named,
                    "named_present": None}, "filesystem")
    names: list[str] = []
    for p in path.iterdir():
        if p.is_dir():
            names += [q.name for q in itertools.islice(p.iterdir(), 1000) if q.name.endswith(CKPT_SUFFIXES)]
        elif p.name.endswith(CKPT_SUFFIXES):
            names.append(p.name)
        if len(names) >= 1000:
            break
    sizes = sorted({int(m[1]) for n in names if (m := _SHARD.search(n))})
    return via({"path": str(path), "exists": True, "files": len(names), "world_sizes": sizes, "named": named,
                "named_present": (path / named).exists() if named else None}, "filesystem")


@probe("model.type_known", timeout=60, uses=("model", "captures"))
def model_type_known(ctx):
    """Whether the installed transformers knows the model's model_type (its auto-config mapping):
    the model_type named in the log, else the one in the model folder's config.json."""
    cfg: dict = {}
    model_type = ctx.capture("model_type")
    if not model_type:
        path = _model_dir(ctx)
        if not (path / "config.json").is_file():
            raise Unknown(f"no config.json in {path}")
        cfg = _read_json(path / "config.json")
        model_type = cfg.get("model_type")
    if not model_type:
        raise Unknown("config.json has no model_type")
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise Unknown("transformers not installed")
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except Exception as exc:
        raise Unknown(f"cannot read transformers' model types: {type(exc).__name__}: {exc}"[:300]) from None
    from errmap.probes.backends import dist_version

    return via({"model_type": model_type, "known": model_type in CONFIG_MAPPING_NAMES,
                "transformers": dist_version("transformers"), "auto_map": bool(cfg.get("auto_map"))},
               "transformers CONFIG_MAPPING_NAMES")


def _text_of(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "".join(str(m.get("content") or "") if isinstance(m, dict) else str(m) for m in prompt)
    return str(prompt)


@probe("data.prompt_tokens", timeout=60, uses=("data", "model", "captures", "config"))
def data_prompt_tokens(ctx):
    """Token counts of the prompts' text (the first 2000 rows), with the model's tokenizer.json.

    The chat template adds tokens around each message, so these counts are a lower bound of what
    the trainer measures: a count above data.max_prompt_length is certain to be too long."""
    table = _table(ctx)
    key = ctx.setting("data.prompt_key", "prompt")
    mdir = _model_dir(ctx)
    tj = mdir / "tokenizer.json"
    if not tj.is_file():
        raise Unknown(f"{mdir} has no tokenizer.json")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise Unknown("the tokenizers package is not installed") from None
    tok = Tokenizer.from_file(str(tj))
    counts: list[int] = []
    for values in table.column(key, batch_size=500):
        texts = [_text_of(p) for p in values[: 2000 - len(counts)]]
        counts += [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
        if len(counts) >= 2000:
            break
    if not counts:
        raise Unknown(f"{table.path} has no rows")
    counts.sort()
    return via({"rows": len(counts), "max": counts[-1], "p50": counts[len(counts) // 2],
                "p99": counts[min(len(counts) - 1, int(len(counts) * 0.99))]}, "tokenizers (text only: a lower bound)")
