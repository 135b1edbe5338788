"""Live probes: named functions that read facts from this machine and the user's files, and verify,
which turns their facts into verdicts on a KB entry's checks.

`PROBES` names every probe the knowledge base may cite; each name maps to a one-line description.
The functions themselves live in the modules of this package and import torch, pyarrow or NVML
lazily, so errmap scans logs on machines that have none of them.
"""

PROBES: dict[str, str] = {
    # GPUs
    "gpu.count": "number of CUDA GPUs visible to this process",
    "gpu.names": "name of each visible GPU",
    "gpu.capability": "compute capability (SM version) of each visible GPU",
    "gpu.bf16": "whether each visible GPU supports bfloat16",
    "gpu.memory": "total and free memory of each visible GPU",
    "gpu.processes": "other processes holding memory on the GPUs",
    "gpu.shared_memory": "opt-in shared memory per block of each visible GPU, in bytes",
    "env.cuda_visible_devices": "the CUDA_VISIBLE_DEVICES variable",
    # Versions
    "driver.version": "NVIDIA driver version",
    "driver.cuda_version": "highest CUDA version the driver supports",
    "torch.version": "installed torch version",
    "torch.cuda_version": "CUDA version torch was built with (torch.version.cuda)",
    "torch.arch_list": "GPU architectures compiled into torch",
    "torch.cuda_build": "whether torch was built with CUDA",
    "torch.cxx11_abi": "whether torch uses the C++11 ABI",
    "torch.gpu_supported": "whether torch's compiled architectures run on each visible GPU",
    "nvcc.version": "CUDA version of the nvcc on PATH",
    "pkg.versions": "installed versions of flash-attn, triton, vllm, sglang, transformers, ray, verl, tensordict, torch",
    "pkg.conflicts": "requirements of the training stack that the installed versions do not meet",
    "nccl.version": "NCCL version torch uses",
    "module.importable": "whether the module named in the log can be imported here",
    # Host
    "host.memory": "host RAM total and available",
    "host.shm": "size and free space of /dev/shm",
    "host.disk": "free space on the file system of the path named in the log",
    "host.port": "whether the port named in the log is free",
    "env.nccl": "NCCL_* environment variables",
    "env.alloc_conf": "the PYTORCH_CUDA_ALLOC_CONF variable",
    "net.interfaces": "network interfaces and their state",
    "net.socket_ifname": "whether NCCL_SOCKET_IFNAME selects an interface that is up",
    # Files
    "data.file": "whether the data file exists, and whether it is parquet or JSON",
    "data.dataset_info": "LLaMA-Factory's dataset_info.json entry for the data file (its formatting and columns)",
    "data.columns": "columns and types of the parquet data file",
    "data.prompt_format": "whether the prompt column holds lists of chat messages",
    "data.data_source": "distinct data_source values of the parquet data file",
    "data.prompt_tokens": "token counts of the prompts (text only, a lower bound) with the model's tokenizer",
    "model.files": "whether the model folder has config.json and tokenizer files",
    "model.chat_template": "whether the model's tokenizer has a chat template",
    "model.vocab": "whether the tokenizer vocabulary fits the model's embedding size",
    "model.type_known": "whether the installed transformers knows the model's model_type",
    "ckpt.files": "how many checkpoint files (weights, shards) the checkpoint folder holds, and their world sizes",
    # The run
    "run.config": "training settings given after `errmap doctor --` or found in the log",
}

