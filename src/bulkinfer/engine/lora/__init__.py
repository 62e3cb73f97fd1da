"""LoRA adapters chosen per request: the request's handle, and the slots the engine keeps them in."""
