"""`recipes-lib export`: a finished run as an ONNX model (and its dynamic int8 copy), checked before it is called done.

    recipes-lib export outputs/demo/full_ft --quantize int8

- onnx_model.py: the model a run saved, merged if it is an adapter, exported with torch.onnx (dynamo);
  the int8 copy by ONNX Runtime's dynamic quantization.
- bundle.py: the export directory: what travels with the model (tokenizer, config with the label
  names, decision threshold or per-class thresholds, the run's text and long-text settings), and
  how predict finds it.
- runtime.py: logits of an exported model through ONNX Runtime, batched like predict's PyTorch path.
- gate.py: the quality gate: the exported models against the PyTorch model on the same held-out rows.
- command.py: the whole export, written to a temporary directory and renamed at the end: export/ when
  the gate passes, export.failed/ when it does not (a previous good export/ is left as it was).
"""

# The gate's defaults (gate.py), here so that building the command line (cli/export.py) imports nothing heavy.
DEFAULT_MAX_METRIC_DROP = 0.5  # points of the headline metric (accuracy: 0.5 points = 0.005)
MIN_FP32_AGREEMENT = 0.99
# int8 must predict as PyTorch does on this share of the gate's rows (docs/export.md: the measurements
# it comes from), and be faster than fp32 at batch 1 by more than this factor (0: not checked).
MIN_INT8_AGREEMENT = 0.97
MIN_INT8_SPEEDUP = 1.0
