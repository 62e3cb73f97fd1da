"""The executor: LLM, scheduler, block manager, model runner, sampler. It knows nothing of files."""
