"""Throughput benchmarks: bulkinfer side by side with hand-written and transformers' batching."""

SYSTEMS = ("bulkinfer", "static", "continuous")
WORKLOADS = ("mixed", "prefix", "synthetic")
