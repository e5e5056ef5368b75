"""Shared library behind the fine-tuning recipes.

Importing it (or any of its modules) changes nothing outside it: no import hook, logging filter,
other package's module or environment variable (tests/test_import_side_effects.py). The supported
transformers range is checked where a run or a command starts (config/versions.py).
"""
