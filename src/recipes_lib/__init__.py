"""The run library: what a recipe run executes. The workbench beside it (recipes_workbench) imports only the
modules PUBLIC_API lists below; this package never imports the workbench (setup.cfg's import-linter contracts;
docs/development.md). Importing it changes nothing outside it (tests/test_import_side_effects.py).
"""

# The public API: the modules the workbench (recipes_workbench) may import; every other module is
# internal (import-linter's public-api contract in setup.cfg; tests/test_packages.py keeps the two equal).
_PUBLIC_MODULES = """
errors units results whole_files locking credentials config.arguments config.parsing config.tasks
config.precision config.recipe_spec config.recipe_options config.adamw_8bit_options config.distill_options
config.family_registry config.versions
config.bitsandbytes_import data.files data.loading data.labels data.label_column data.tokenize data.long_text
modeling.families modeling.adapters modeling.sources modeling.weight_files evaluation.predictions
evaluation.metrics evaluation.inference evaluation.windows evaluation.collapse evaluation.neglected
training.checkpoints tracking.names tracking.model_card tracking.wandb_run tracking.hub tracking.auth
"""
PUBLIC_API = tuple(f"recipes_lib.{name}" for name in _PUBLIC_MODULES.split())
