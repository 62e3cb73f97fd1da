"""Tool-call parsers: the function calls a model wrote, read out of its answer."""
