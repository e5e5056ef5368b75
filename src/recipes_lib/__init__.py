"""Shared library behind the fine-tuning recipes."""
