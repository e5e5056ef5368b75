"""A run's model as ONNX: merged first if it is an adapter, exported with torch.onnx, quantized to int8 by ONNX Runtime.

torch.onnx's exporters, not optimum's (it pins transformers below 4.58); docs/export.md gives the steps.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from pathlib import Path

import torch

from recipes_lib.errors import ModelError
from recipes_lib.modeling.adapters import (
    ADAPTER_CONFIG_FILE,
    MERGED_SUBDIR,
    load_trained_model,
    merge_adapter,
    read_base_quantization,
)

logger = logging.getLogger(__name__)

DYNAMO, TORCHSCRIPT = "dynamo", "torchscript"
# ONNX's protobuf cannot hold more than 2 GiB: larger models keep their weights in a .data file beside.
SINGLE_FILE_LIMIT_BYTES = 1.8 * 2**30
LOGITS_OUTPUT = "logits"
# LogitsOnly.forward's arguments, in its order: the exported graph's inputs are named so.
FORWARD_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


# torch.onnx's operator registry warns once per torchvision operator (nms, roi_align, ...) that it skips
# it when torchvision is not installed: no text classifier has those operators, so the lines are dropped.
REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"
TORCHVISION_NOTE = "torchvision is not installed"


@contextlib.contextmanager
def torchvision_notes_dropped():
    """The notes dropped while the block exports; the registry logger as it was afterwards."""
    registry_logger = logging.getLogger(REGISTRY_LOGGER)

    def dropping(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TORCHVISION_NOTE)

    registry_logger.addFilter(dropping)
    try:
        yield
    finally:
        registry_logger.removeFilter(dropping)


class LogitsOnly(torch.nn.Module):
    """The classifier with named tensor inputs and its logits as the one output (no ModelOutput, no loss)."""

    def __init__(self, model, input_names: list[str]):
        super().__init__()
        self.model = model
        self.input_names = list(input_names)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        return self.model(**{name: inputs[name] for name in self.input_names}).logits


def model_to_export(model_dir: str | Path, scratch_dir: str | Path):
    """The plain fp32 classifier to export from a run's model directory, and what it is, in words: an
    adapter merged into its base (a QLoRA one dequantized, as --merge_adapter does, in `scratch_dir`)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    model_dir = Path(model_dir)
    if not (model_dir / ADAPTER_CONFIG_FILE).is_file():
        source, what = model_dir, "the full model"
    elif (model_dir / MERGED_SUBDIR / "config.json").is_file():
        source, what = model_dir / MERGED_SUBDIR, f"the merged model the run saved ({MERGED_SUBDIR}/)"
    elif read_base_quantization(model_dir) is None:
        model = load_trained_model(model_dir, device="cpu").merge_and_unload()
        return model.float().eval(), "the LoRA adapter merged into its base"
    else:
        from recipes_lib.config.arguments import ModelArguments

        base = json.loads((model_dir / ADAPTER_CONFIG_FILE).read_text())["base_model_name_or_path"]
        source = Path(scratch_dir) / MERGED_SUBDIR
        what = "the QLoRA adapter merged into its 4-bit base dequantized to fp32"
        run_config = AutoConfig.from_pretrained(model_dir)
        merge_adapter(ModelArguments(model_name_or_path=base), run_config, model_dir, source)
    model = AutoModelForSequenceClassification.from_pretrained(source, dtype=torch.float32)
    return model.eval(), what


def export_onnx(
    model, tokenizer, path: str | Path, exporters: tuple[str, ...] = (DYNAMO, TORCHSCRIPT)
) -> str:
    """Write `model` (a sequence classifier) to `path` as ONNX with dynamic batch and sequence axes; returns
    the exporter that made it (the first of `exporters` that can), or a ModelError naming every failure."""
    input_names = list(tokenizer.model_input_names)
    wrapper = LogitsOnly(model, input_names).eval()
    # Two rows of different lengths: padding and a mask that is not all ones are in the traced graph.
    example = tokenizer(["an example to export", "a second, longer example to export with"], padding=True,
                        return_tensors="pt")  # fmt: skip
    example = {name: example[name] for name in input_names}
    dynamic_axes = {name: {0: "batch", 1: "sequence"} for name in input_names}
    dynamic_axes[LOGITS_OUTPUT] = {0: "batch"}
    parameter_bytes = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    external_data = parameter_bytes > SINGLE_FILE_LIMIT_BYTES
    path = Path(path)
    failures = []
    for exporter in exporters:
        try:
            with warnings.catch_warnings(), torch.no_grad(), torchvision_notes_dropped():
                # the exporters' notes on deprecated arguments and traced branches
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    wrapper,
                    (),
                    f=str(path),
                    kwargs=example,
                    input_names=[name for name in FORWARD_INPUTS if name in input_names],
                    output_names=[LOGITS_OUTPUT],
                    dynamic_axes=dynamic_axes,
                    dynamo=exporter == DYNAMO,
                    external_data=external_data,
                    verbose=False,
                    **({"opset_version": 17} if exporter == TORCHSCRIPT else {}),
                )
            if failures and exporter != exporters[0]:
                logger.warning(
                    "The dynamo exporter failed (%s); exported with TorchScript instead.", failures[0]
                )
            return exporter
        except Exception as error:  # the exporters raise many kinds: each is a reason to try the other
            text = str(error).strip()
            failures.append(
                f"{exporter}: {type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]
            )
            for leftover in (path, path.with_name(path.name + ".data")):
                leftover.unlink(missing_ok=True)
    raise ModelError(
        f"The {model.config.model_type} model could not be exported to ONNX by either exporter ("
        + "; ".join(failures)
        + "). Upgrade torch and onnxscript, or serve it with `recipes-lib predict` in PyTorch."
    )


def export_for_int8(model, tokenizer, path: str | Path) -> bool:
    """The graph int8 is made from, whose attention ONNX Runtime fuses (docs/export.md, step 1): the
    TorchScript trace with eager attention, restored after. False where TorchScript cannot export the model."""
    previous = model.config._attn_implementation
    switch = previous != "eager" and getattr(model, "_can_set_attn_implementation", lambda: False)()
    try:
        if switch:
            model.set_attn_implementation("eager")
        export_onnx(model, tokenizer, path, exporters=(TORCHSCRIPT,))
        return True
    except ModelError as error:
        logger.warning(
            "The int8 model is made from model.onnx, whose attention ONNX Runtime does not fuse: the TorchScript "
            "trace it prefers failed (%s).",
            error,
        )
        return False
    finally:
        if switch:
            model.set_attn_implementation(previous)


INT8_WEIGHTS = ("signed", "unsigned")
# ONNX Runtime's transformer optimizer fuses these into its own operators before quantizing (the counts go in the report).
FUSIONS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu",
           "FastGelu", "Gelu", "LayerNormalization")  # fmt: skip


class Int8Quantizer:
    """ONNX Runtime's dynamic int8 quantization (docs/export.md gives the steps), prepared once, then quantized
    as often as the sensitivity pass asks. `weights`: "signed" (int8, U8S8 matmuls) or "unsigned" (uint8, U8U8)."""

    def __init__(self, source: str | Path, scratch: str | Path, weights: str = "signed", model_config=None):
        source, scratch = Path(source), Path(scratch)
        scratch.mkdir(parents=True, exist_ok=True)
        self.weights = weights
        self.external = _has_external_data(source)
        self.prepared = scratch / "prepared.onnx"
        from onnxruntime.quantization.shape_inference import quant_pre_process

        with _quiet_root_logger():
            fused, self.fused_operators = _fuse(source, scratch / "fused.onnx", model_config, self.external)
            # Symbolic shape inference (auto_merge: the exported graphs name one dimension in several
            # ways), ONNX shape inference and its graph optimizations.
            quant_pre_process(str(fused), str(self.prepared), auto_merge=True,
                              save_as_external_data=self.external, all_tensors_to_one_file=True)  # fmt: skip

    def candidates(self) -> list[str]:
        """The nodes quantize_dynamic quantizes: matmuls by a weight, attention, embedding lookups."""
        import onnx

        graph = onnx.load(str(self.prepared), load_external_data=False).graph
        weights = {tensor.name for tensor in graph.initializer}
        return [
            node.name
            for node in graph.node
            if node.op_type in ("Attention", "EmbedLayerNormalization", "Gather")
            or (node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in weights)
        ]

    def quantize(self, int8_path: str | Path, nodes_to_exclude=()) -> dict:
        """Write the int8 model; returns what was done (the report's "int8")."""
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with _quiet_root_logger():
            quantize_dynamic(
                self.prepared,
                Path(int8_path),
                weight_type=QuantType.QInt8 if self.weights == "signed" else QuantType.QUInt8,
                per_channel=True,
                nodes_to_exclude=list(nodes_to_exclude),
                use_external_data_format=self.external,
            )
        return {
            "weights": f"per-channel {self.weights} int8",
            "fused_operators": self.fused_operators,
            "nodes_kept_fp32": list(nodes_to_exclude),
        }


def _has_external_data(path: Path) -> bool:
    """Whether the graph keeps its weights in files beside it (either exporter, above 1.8 GiB): then
    every step writes its weights beside it too (ONNX's protobuf cannot hold 2 GiB)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in graph.initializer)


@contextlib.contextmanager
def _quiet_root_logger():
    """The quantizer and the optimizer log a line per tensor or pattern on the root logger at INFO."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


def _fuse(fp32_path: Path, fused_path: Path, model_config, external: bool) -> tuple[Path, dict[str, int]]:
    """The graph fused by onnxruntime.transformers.optimizer ("bert" patterns), and the fused operators'
    counts; the unfused graph where the optimizer fails on it (logged)."""
    from onnxruntime.transformers.optimizer import optimize_model

    heads = getattr(model_config, "num_attention_heads", 0) or 0
    hidden = getattr(model_config, "hidden_size", 0) or 0
    try:
        optimized = optimize_model(
            str(fp32_path), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0, use_gpu=False
        )
        statistics = optimized.get_fused_operator_statistics()
        optimized.save_model_to_file(str(fused_path), use_external_data_format=external)
    except Exception as error:  # the optimizer's pattern matchers raise many kinds on graphs they do not know
        logger.warning("ONNX Runtime's transformer optimizer could not fuse the graph (%s); quantizing it unfused.",
                       f"{type(error).__name__}: {error}"[:300])  # fmt: skip
        return fp32_path, {}
    return fused_path, {op: int(statistics[op]) for op in FUSIONS if statistics.get(op)}


def files_of(onnx_path: str | Path) -> list[Path]:
    """An ONNX model's files: the graph, and its external weights where it has them."""
    onnx_path = Path(onnx_path)
    return [path for path in (onnx_path, onnx_path.with_name(onnx_path.name + ".data")) if path.is_file()]


def size_on_disk(onnx_path: str | Path) -> int:
    return sum(path.stat().st_size for path in files_of(onnx_path))
