"""Throughput benchmarks: bulkinfer side by side with hand-written and transformers' batching."""

SYSTEMS = ("bulkinfer", "static", "continuous")
WORKLOADS = ("mixed", "prefix", "synthetic")
QUANTIZATIONS = ("fp8", "w4a16", "w8a16")  # bench --quantization (bench/quantized_model.py)
