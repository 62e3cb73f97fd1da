"""LoRA adapters in PEFT's format: reading one from disk, and the model's stacked slots that hold them."""
