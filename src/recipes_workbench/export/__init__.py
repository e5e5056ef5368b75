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

# How `recipes-lib export` made each family's ONNX file (`recipes-lib families` shows it), measured on its
# tiny model (exported, int8 added, and passed through the gate by tests/workbench/test_export.py::
# test_every_family_exports_and_passes_the_gate, which checks these), by the family's model_type: the
# exporter where it is not "dynamo" (torch.export), e.g. "torchscript" (the fallback); where export
# fails, why, in one line.
DEFAULT_ONNX_EXPORTER = "dynamo"
ONNX_EXPORTERS: dict[str, str] = {}
ONNX_EXPORT_FAILURES: dict[str, str] = {}
