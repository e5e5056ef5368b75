"""Shared library behind the fine-tuning recipes."""

from recipes_lib.config.versions import check_supported_versions

check_supported_versions()  # one line naming the supported range, instead of a failure deep in transformers
