"""The arithmetic of training steps: the protocol's ``precision`` (fp32, tf32, bf16).

fp32 is the default and the same on CPU and GPU, so GPU tables compare with CPU tables. tf32 lets a
CUDA GPU's fp32 matmuls run in TF32 (10-bit mantissa inputs, fp32 accumulation); bf16 runs the
forward pass under bfloat16 autocast and takes its outputs back to fp32 for the loss and penalty,
while the weights, their gradients and Adam's state stay fp32 (bf16 keeps fp32's exponent range, so no loss scaling is needed). Validation
losses, checkpoints and every evaluation are computed in fp32 whatever the precision.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device) -> Iterator[None]:
    """While training: a CUDA GPU's fp32 matmuls in TF32 for precision=tf32, in full fp32 otherwise
    (whatever the process had set), restored afterwards."""
    if device.type != "cuda":
        yield
        return
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "tf32" if precision == "tf32" else "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = before


def step_autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context of a step's forward pass: bfloat16 autocast for precision=bf16 (without
    autocast's weight-cast cache, which a captured CUDA graph cannot hold), else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()
