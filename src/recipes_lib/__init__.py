"""Shared library behind the fine-tuning recipes."""

from recipes_lib.config.bitsandbytes_import import defer_bitsandbytes
from recipes_lib.config.versions import check_supported_versions

defer_bitsandbytes()  # before anything imports peft, which imports bitsandbytes: it loads when a recipe uses it
check_supported_versions()  # one line naming the supported range, instead of a failure deep in transformers
