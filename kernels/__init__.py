"""Compute kernels for bulkinfer, shipped as the subpackage ``bulkinfer.kernels``.

Each file holds one kernel: a plain-PyTorch reference (which is also the CPU execution path) and,
beside it, the Triton kernel with its launcher. Tests compare the two; on machines without a GPU
they run the Triton kernels in Triton's interpreter (TRITON_INTERPRET=1).
"""
