"""Automatic bf16 on the CPU (config/precision.py): chosen where the CPU multiplies in bf16 natively, read
from its flags and oneDNN, with CPUs simulated so that every case is tested on any machine; every
family's tiny model trained under CPU bf16 autocast, or its registry entry saying why it cannot be."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from recipes_lib.config.family_registry import family_for
from recipes_lib.config.precision import choose_precision, cpu_capability, cpu_flags
from tests.helpers.data import learnable_rows
from tests.helpers.models import FAMILY_SHAPES, build_tiny_family
from tests.helpers.repo import REPO_ROOT
from tests.helpers.runs import QUICK, run_args, run_recipe_process

CPUINFO = (
    "processor\t: 0\nmodel name\t: A CPU\nflags\t\t: fpu sse4_2 avx avx2 fma {extra}\nbogomips\t: 4800\n"
)


@pytest.mark.parametrize(
    "extra, onednn_bf16, native",
    [
        ("avx512f avx512_bf16", True, True),  # AVX-512 BF16: Cooper Lake, AMD Zen 4 and later
        ("avx512f amx_tile amx_bf16", True, True),  # AMX: Sapphire Rapids and later
        ("avx512f", True, False),  # AVX-512 without BF16 (Ice Lake): oneDNN runs bf16, converting to fp32
        ("", False, False),  # AVX2 only: most laptops, AMD before Zen 4
        ("avx512f avx512_bf16", False, False),  # the flags, but ONEDNN_MAX_CPU_ISA caps oneDNN below them
    ],
)
def test_bf16_is_automatic_only_where_the_cpu_flags_and_onednn_both_say_native(
    tmp_path, extra, onednn_bf16, native
):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(extra=extra))
    flags = cpu_flags(cpuinfo)
    assert "avx2" in flags and ("avx512_bf16" in flags) == ("avx512_bf16" in extra)
    capability = cpu_capability(flags, onednn_bf16=onednn_bf16, onednn_fp16=False, kernels="AVX512")
    assert capability.native_bf16 is native
    choice = choose_precision(capability, bf16=None, fp16=None, launcher=None, model_type="bert")
    assert choice.precision == ("bf16" if native else "fp32") and not choice.explicit
    assert capability.name in choice.reason
    refused = choose_precision(capability, bf16=False, fp16=None, launcher=None, model_type="bert")
    assert refused.precision == "fp32"


def test_without_readable_flags_onednn_decides(tmp_path):
    assert cpu_flags(tmp_path / "absent") is None
    for onednn_bf16 in (True, False):
        capability = cpu_capability(None, onednn_bf16=onednn_bf16, onednn_fp16=False, kernels="AVX2")
        assert capability.native_bf16 is onednn_bf16


def _steps(model, batch, labels, autocast: bool, steps: int = 10) -> list[float]:
    """Each step's loss over `steps` AdamW steps of the trainable parameters on one batch."""
    import torch

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _train(model_dir, batch, labels, autocast: bool) -> list[float]:
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    return _steps(
        AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2), batch, labels, autocast
    )


def _learnable_batch(model_dir, rows: int):
    """The tokenized batch and label ids of `rows` learnable rows, for the model in model_dir."""
    import torch
    from transformers import AutoTokenizer

    examples = learnable_rows(rows, seed=1)
    names = sorted({label for _, label in examples})
    batch = AutoTokenizer.from_pretrained(model_dir)(
        [text for text, _ in examples], padding=True, return_tensors="pt"
    )
    return batch, torch.tensor([names.index(label) for _, label in examples])


@pytest.mark.parametrize("model_type", list(FAMILY_SHAPES))
def test_every_family_trains_under_cpu_bf16_autocast_or_its_entry_says_why_not(model_type, tmp_path):
    import math

    model_dir = build_tiny_family(model_type, tmp_path / model_type)
    batch, labels = _learnable_batch(model_dir, 64)
    fails = family_for(model_type).bf16_autocast_fails
    if fails:
        with pytest.raises(RuntimeError, match="BFloat16"):
            _train(model_dir, batch, labels, autocast=True)
        return
    fp32, bf16 = _train(model_dir, batch, labels, False), _train(model_dir, batch, labels, True)
    assert all(math.isfinite(loss) for loss in bf16), bf16
    # It learns as fp32 does: the loss falls by at least half as much.
    assert bf16[0] - bf16[-1] > 0.5 * (fp32[0] - fp32[-1]) > 0, (fp32, bf16)


def test_a_recipe_on_this_cpu_uncapped_trains_in_what_automatic_precision_picks_here(
    tiny_bert, learnable_data, tmp_path
):
    """The suite caps oneDNN (conftest.py); here a recipe runs as a user's does, uncapped: results.json
    says the precision choose_precision gives this machine (bf16 with AVX-512 BF16 or AMX, else fp32)."""
    env = {key: value for key, value in os.environ.items() if key != "ONEDNN_MAX_CPU_ISA"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
    expected = subprocess.run(
        [sys.executable, "-c", "from recipes_lib.config.precision import choose_precision, detect_capability; "
         "print(choose_precision(detect_capability(True), bf16=None, fp16=None, launcher=None).precision)"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.strip()  # fmt: skip
    done = run_recipe_process("full_ft", run_args(tiny_bert, learnable_data, tmp_path, **QUICK), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["precision"] == expected, results["precision_reason"]
    assert results["precision_reason"].startswith("automatic")
    assert f"precision {expected} (automatic" in done.stdout  # the one line at start


def _qlora_under_bf16_autocast(model_dir, batch, labels) -> list[float]:
    """QLoRA as recipes/qlora.py builds it on a bf16 CPU (4-bit base computing in bf16, LoRA), trained
    under bf16 autocast."""
    import torch
    from transformers import AutoConfig

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.config.recipe_options import LoraArguments
    from recipes_lib.modeling.adapters import add_lora, nf4_quantization_config, prepare_4bit_model
    from recipes_lib.modeling.loading import load_model

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(model_dir, num_labels=2)
    quantization = nf4_quantization_config(config, "bf16")
    base = load_model(
        ModelArguments(str(model_dir)), config, quantization_config=quantization, device_map={"": "cpu"}
    )
    return _steps(add_lora(prepare_4bit_model(base), LoraArguments()), batch, labels, autocast=True)


@pytest.mark.parametrize("model_type", list(FAMILY_SHAPES))
def test_every_family_trains_qlora_under_cpu_bf16_autocast_or_its_entry_says_why_not(model_type, tmp_path):
    """QLoRA on DeBERTa-v3 failed on an H200 under bf16 ("value cannot be converted to type
    c10::BFloat16 without overflow"); the same happened on the tiny DeBERTa-v2 under CPU bf16 autocast
    until the 4-bit linears returned autocast's dtype (adapters.prepare_4bit_model)."""
    import math

    model_dir = build_tiny_family(model_type, tmp_path / model_type)
    batch, labels = _learnable_batch(model_dir, 32)
    if family_for(model_type).bf16_autocast_fails:  # DeBERTa v1: its own fp32 bias, not the 4-bit layers
        with pytest.raises(RuntimeError, match="BFloat16"):
            _qlora_under_bf16_autocast(model_dir, batch, labels)
        return
    losses = _qlora_under_bf16_autocast(model_dir, batch, labels)
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < losses[0], losses


def test_a_quantized_linear_returns_autocasts_dtype_under_autocast_and_its_inputs_outside(tiny_bert):
    import torch
    from transformers import AutoConfig

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling.adapters import nf4_quantization_config, prepare_4bit_model
    from recipes_lib.modeling.loading import load_model

    config = AutoConfig.from_pretrained(tiny_bert, num_labels=2)
    base = load_model(
        ModelArguments(str(tiny_bert)),
        config,
        quantization_config=nf4_quantization_config(config, "bf16"),
        device_map={"": "cpu"},
    )
    query = prepare_4bit_model(base).bert.encoder.layer[0].attention.self.query
    inputs = torch.randn(2, 3, query.in_features)
    assert query(inputs).dtype == torch.float32  # no autocast: the input's dtype, as bitsandbytes returns it
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert query(inputs).dtype == torch.bfloat16  # as nn.Linear's under autocast
