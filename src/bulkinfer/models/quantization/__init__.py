"""Quantized checkpoints: which format config.json's ``quantization_config`` names, whether bulkinfer
runs it, and how each format's tensors on disk become the layouts the quantized layers hold
(layers/quantized_weights.py). One module per on-disk layout."""
