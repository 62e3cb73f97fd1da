"""Model architectures (our own code, reading Hugging Face checkpoints) and their loading."""
