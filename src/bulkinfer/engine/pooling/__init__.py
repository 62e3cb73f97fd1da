"""Pooling requests: embed, classify, reward and score, run prefill-only through the generation scheduler."""
