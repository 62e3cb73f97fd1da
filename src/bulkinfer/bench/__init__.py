"""Throughput benchmarks: bulkinfer side by side with hand-written and transformers' batching."""
