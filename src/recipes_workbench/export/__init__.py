"""`recipes-lib export`: a finished run as an ONNX model (and its dynamic int8 copy), checked before it is called done.

    recipes-lib export outputs/demo/full_ft --quantize int8

Each module's docstring says its part; docs/development.md lists them, docs/export.md the command.
"""

# The gate's defaults (gate.py), here so that building the command line (cli/export.py) imports nothing heavy.
DEFAULT_MAX_METRIC_DROP = 0.5  # points of the headline metric (accuracy: 0.5 points = 0.005)
MIN_FP32_AGREEMENT = 0.99
# int8 must predict as PyTorch does on this share of the gate's rows (docs/export.md: the measurements
# it comes from), and be faster than fp32 at batch 1 by more than this factor (0: not checked).
MIN_INT8_AGREEMENT = 0.97
MIN_INT8_SPEEDUP = 1.0
