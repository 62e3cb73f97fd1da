"""What a token costs in the KV cache of a model, for `bulkinfer inspect --model`: the cache's dtype
decides how many sequences fit, so a user can see it before a long job."""

from __future__ import annotations

from bulkinfer.engine.config import EngineConfig
from bulkinfer.errors import UsageError


def kv_cache_line(model: str, options: EngineConfig) -> str:
    """"float8_e4m3fn, 1,024 bytes per token": the dtype the engine would store on this machine, and a
    token's keys and values (a latent attention model's latent rows) over every layer."""
    from bulkinfer.engine.kv_budget import kv_bytes_per_token
    from bulkinfer.engine.resolve import resolve
    from bulkinfer.models.checkpoint import resolve_model_path
    from bulkinfer.models.loader import read_config

    try:
        config = read_config(resolve_model_path(model, options.revision), options.model_impl)[0]
        resolved = resolve(options, config)
    except ValueError as exc:  # an unsupported model, or options it cannot run with
        raise UsageError(str(exc)) from None
    shapes = [config.kv_shape] * config.num_attention_layers
    dtype = str(resolved.kv_cache_dtype).removeprefix("torch.")
    return f"{dtype}, {kv_bytes_per_token(shapes, resolved.kv_cache_dtype):,} bytes per token"
