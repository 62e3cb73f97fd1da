"""Any causal LM that transformers can build, run on bulkinfer's paged KV cache (``model_impl="transformers"``).

transformers' own model code computes everything but attention: embeddings, norms, rotary or learned
positions, MLPs and experts, the LM head. Its attention modules call whichever function is registered
under the model's attention implementation; bulkinfer registers its paged attention there (attention.py),
so every layer stores the step's keys and values in its cache blocks and attends through the same
kernels the native models use. The scheduler, prefix cache, chunked prefill, sampling and scoring
around the model are the engine's, unchanged.
"""
