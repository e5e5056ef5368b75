"""`recipes-lib sweep` (docs/sweeps.md; docs/development.md lists its modules). Optuna, the `sweep` extra,
is imported by study.py and runner.py; config.py and preflight.py do not import it.
"""
