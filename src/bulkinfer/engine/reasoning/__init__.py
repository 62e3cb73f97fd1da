"""Reasoning parsers: where a thinking model's reasoning ends and its answer begins, read from token ids."""
