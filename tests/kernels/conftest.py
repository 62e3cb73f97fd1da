"""Kernel tests run on CUDA when there is one, else in Triton's interpreter.

The interpreter must be chosen before any kernel module is imported (Triton decides when a kernel
is defined); the top-level conftest does the same, this keeps the folder runnable on its own.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
