"""Anchors whose wording is shared with failures of another kind: what they take and what they leave."""

from __future__ import annotations

import pytest

from errmap.scan.events import Match, Unrecognized
from errmap.scan.scanner import scan_chunks


def found(matcher, line: str) -> list:
    events = scan_chunks(matcher, "t.log", [(line + "\n").encode()])
    return [(e.entry.errno, e.captures) if isinstance(e, Match) else ("unrecognized", e.type)
            for e in events if isinstance(e, (Match, Unrecognized))]


# Recorded on an NVIDIA H200 with torch 2.11.0+cu130 and on CPU with torch 2.13.0+cpu (Convolution.cpp).
CONV_DTYPE = [
    ("Input type (float) and bias type (c10::BFloat16) should be the same", "float", "c10::BFloat16"),
    ("Input type (torch.cuda.FloatTensor) and weight type (CUDABFloat16Type) should be the same",
     "torch.cuda.FloatTensor", "CUDABFloat16Type"),
    ("Input type (torch.cuda.FloatTensor) and weight type (torch.cuda.HalfTensor) should be the same",
     "torch.cuda.FloatTensor", "torch.cuda.HalfTensor"),
    ("Input type (CUDABFloat16Type) and weight type (torch.cuda.FloatTensor) should be the same",
     "CUDABFloat16Type", "torch.cuda.FloatTensor"),
    ("Input type (torch.FloatTensor) and weight type (CPUBFloat16Type) should be the same or input should be a MKLDNN"
     " tensor and weight is a dense tensor", "torch.FloatTensor", "CPUBFloat16Type"),
    # the device differs too, and so does the dtype: still a dtype mismatch
    ("Input type (torch.FloatTensor) and weight type (torch.cuda.HalfTensor) should be the same or input should be a"
     " MKLDNN tensor and weight is a dense tensor", "torch.FloatTensor", "torch.cuda.HalfTensor"),
]

CONV_DEVICE_ONLY = [
    "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
    "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same or input should be a"
    " MKLDNN tensor and weight is a dense tensor",
    "Input type (CUDABFloat16Type) and weight type (CPUBFloat16Type) should be the same",
    "Input type (CPUBFloat16Type) and weight type (CUDABFloat16Type) should be the same or input should be a MKLDNN"
    " tensor and weight is a dense tensor",
]


@pytest.mark.parametrize("message, a, b", CONV_DTYPE)
def test_a_convolution_type_mismatch_of_two_dtypes_is_1016(matcher, message, a, b):
    assert found(matcher, "RuntimeError: " + message) == [(1016, {"dtype_a": a, "dtype_b": b})]


@pytest.mark.parametrize("message", CONV_DEVICE_ONLY)
def test_a_convolution_type_mismatch_of_devices_only_is_not_a_dtype_problem(matcher, message):
    # same wording, same dtype on two devices: not 1016, and still shown as an unknown failure
    assert found(matcher, "RuntimeError: " + message) == [("unrecognized", "RuntimeError")]


@pytest.mark.parametrize("cls, kwarg", [
    ("ORPOTrainer", "tokenizer"), ("KTOTrainer", "tokenizer"), ("NashMDTrainer", "tokenizer"),
    ("OnlineDPOTrainer", "tokenizer"), ("SFTTrainer", "dataset_text_field"), ("Trainer", "tokenizer"),
    ("SFTConfig", "max_seq_length"), ("ORPOConfig", "max_seq_length"), ("GRPOConfig", "use_vllm"),
    ("LoraConfig", "use_dora"), ("TrainingArguments", "evaluation_strategy"),
])
def test_a_trainer_or_config_refusing_a_keyword_is_a_version_mismatch(matcher, cls, kwarg):
    line = f"TypeError: {cls}.__init__() got an unexpected keyword argument '{kwarg}'"
    assert found(matcher, line) == [(1048, {"callable": f"{cls}.__init__", "cls": cls, "kwarg": kwarg})]


@pytest.mark.parametrize("cls", ["Linear", "MyDataset", "RewardModel", "Config", "myTrainer", "AdamW"])
def test_other_classes_refusing_a_keyword_stay_unknown(matcher, cls):
    line = f"TypeError: {cls}.__init__() got an unexpected keyword argument 'foo'"
    assert found(matcher, line) == [("unrecognized", "TypeError")]


def test_remote_code_missing_packages_name_the_first_as_the_module(matcher):
    line = ("ImportError: This modeling file requires the following packages that were not found in your environment: "
            "einops, flash_attn. Run `pip install einops flash_attn`")
    assert found(matcher, line) == [(1008, {"packages": "einops, flash_attn", "module": "einops"})]


CHECKPOINT = ("The checkpoint you are trying to load has model type `deepseek_vl_v2` but Transformers does not recognize this"
              " architecture. This could be because of an issue with the checkpoint, or because your version of"
              " Transformers is out of date.")


def test_an_unknown_model_type_raised_is_1042(matcher):
    assert [e[0] for e in found(matcher, "ValueError: " + CHECKPOINT)] == [1042]


@pytest.mark.parametrize("notice", [
    # lmdeploy's model check, which then reads config.json itself and serves the model
    "lmdeploy - WARNING - supported_models.py - AutoConfig.from_pretrained failed for /models/vl. Exception: " + CHECKPOINT,
    "WARNING AutoConfig.from_pretrained failed for /models/x (" + CHECKPOINT + "); falling back to raw config.json.",
])
def test_a_fallback_notice_quoting_it_is_not(matcher, notice):
    assert 1042 not in [e[0] for e in found(matcher, notice)]
