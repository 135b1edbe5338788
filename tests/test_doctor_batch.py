"""doctor predicts 1039 from the batch keys, by verl's own divisibility rules (FSDP actor)."""

from __future__ import annotations

import json

import pytest

from conftest import errmap

MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"
MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"


def batch_warnings(*overrides: str) -> list[str]:
    doc = json.loads(errmap("doctor", "--format", "json", "--", *overrides, timeout=300).stdout)
    return [w["says"] for w in doc["warnings"] if w["errno"] == 1039]


@pytest.mark.parametrize("overrides, says", [
    (["data.train_batch_size=12", f"{MINI}=8"], "real_train_batch_size 12 (train_batch_size=12 × n=1 (verl default)) is not divisible by the 8 GPUs"),
    (["data.train_batch_size=16", f"{MINI}=32"], "train_batch_size=16 is smaller than ppo_mini_batch_size=32"),
    (["data.train_batch_size=64", f"{MINI}=4"], "ppo_mini_batch_size=4 × n=1 (verl default) over 8 data-parallel ranks is 0 per GPU"),
    (["data.train_batch_size=64", f"{MINI}=64", "actor_rollout_ref.rollout.n=5", f"{MICRO}=16"],
     "the per-GPU mini-batch (ppo_mini_batch_size=64 × n=5 / 8 ranks = 40) is not divisible by ppo_micro_batch_size_per_gpu=16"),
    (["data.train_batch_size=6", f"{MINI}=6", "trainer.n_gpus_per_node=2", "trainer.nnodes=2", f"{MICRO}=1"],
     "real_train_batch_size 6 (train_batch_size=6 × n=1 (verl default)) is not divisible by the 4 GPUs"),
])
def test_each_rule(overrides, says):
    found = batch_warnings(*overrides)
    assert len(found) == 1 and found[0].startswith(says), found


def test_valid_batches_and_megatron_give_nothing():
    assert batch_warnings("data.train_batch_size=64", f"{MINI}=16", f"{MICRO}=2", "actor_rollout_ref.rollout.n=4") == []
    assert batch_warnings("data.train_batch_size=12", "actor_rollout_ref.actor.strategy=megatron") == []


def test_misspelt_keys_get_a_did_you_mean():
    doc = json.loads(errmap("doctor", "--format", "json", "--", "data.train_batch_szie=64",
                            "actor_rollout_ref.rollout.gpu_memory_utilisation=0.5",
                            "actor_rollout_ref.model.override_config.attn_implementation=eager",  # a free mapping
                            "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4", "+trainer.my_key=1",
                            "trainer.n_gpus_per_node=8", timeout=300).stdout)
    says = [w["says"] for w in doc["warnings"] if w["errno"] == 1038]
    assert [s.split(":")[0] for s in says] == ["data.train_batch_szie is not a key of verl's PPO trainer config (as of verl 0.8.0.dev)",
                                               "actor_rollout_ref.rollout.gpu_memory_utilisation is not a key of verl's PPO trainer config (as of verl 0.8.0.dev)"]
    assert "did you mean data.train_batch_size?" in says[0]
    assert "did you mean actor_rollout_ref.rollout.gpu_memory_utilization?" in says[1]
