"""The parser of `recipes-lib plan`; its body is tools/plan.py."""

from __future__ import annotations

from recipes_workbench.planner.setup import DEFAULT_CUDA_OVERHEAD_GIB, SHARDED_PARTS


def add_plan_parser(commands) -> None:
    plan_parser = commands.add_parser(
        "plan",
        help="Predict peak training memory from the model config alone (no weights, no GPU).",
        description="Predict peak training memory from the model config alone (no weights, no GPU). "
        "See src/recipes_workbench/planner/arithmetic.py for the arithmetic.",
    )
    plan_parser.add_argument(
        "--model",
        nargs="+",
        help="Hub id, local model directory or config.json (several: one table); with --fits, catalogue "
        "models to list (default: all of them)",
    )
    plan_parser.add_argument(
        "--fits",
        action="store_true",
        help="what trains in the budget: every catalogue model x every recipe, without and with activation "
        "checkpointing: the largest batch, and the cheapest recipe that fits --per_device_train_batch_size",
    )
    plan_parser.add_argument(
        "--recipe",
        default="all",
        help="a recipe of recipes/ (its SPEC's name: full_ft, lora, ...) or all (default): the training "
        "shape it declares with its default options",
    )
    plan_parser.add_argument(
        "--teacher",
        help="with --recipe distill (or all): the teacher, the output_dir of its run or a model name; its pass "
        "(inference only, before the student loads) is planned apart from the student (--model)",
    )
    plan_parser.add_argument("--per_device_train_batch_size", type=int, default=32)
    plan_parser.add_argument("--max_seq_length", type=int, default=128)
    plan_parser.add_argument("--num_labels", type=int, default=2, help="classes of the task (sizes the head)")
    plan_parser.add_argument(
        "--gradient_checkpointing",
        "--activation_checkpointing",
        action="store_true",
        dest="gradient_checkpointing",
    )
    # These change the shapes of the recipes that have them (default: each recipe's own).
    plan_parser.add_argument("--lora_r", type=int, help="LoRA rank, for the recipes with adapters")
    plan_parser.add_argument(
        "--lora_target_modules", nargs="+", help="layers that get adapters, or all-linear"
    )
    plan_parser.add_argument("--lora_dropout", type=float, help="dropout on the adapters' input")
    plan_parser.add_argument(
        "--embedding_optimizer_bits",
        type=int,
        choices=[8, 32],
        help="AdamW state bits of nn.Embedding weights, for the recipes with 8-bit optimizer state",
    )
    add_plan_machine_options(plan_parser)
    plan_parser.add_argument(
        "--no_family", action="store_true", help="skip the largest-BERT-family-configuration answer"
    )
    plan_parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")


def add_plan_machine_options(plan_parser) -> None:
    """Where and how the run trains: precision, device, memory, processes and their sharding, and the
    memory techniques of the largest encoders (recipes_workbench/planner/plan.py)."""
    plan_parser.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "fp16"],
        default="auto",
        help="the precision to plan; auto (default): what the recipe picks for each model's family on this "
        "machine's GPU, or with no GPU here on a bf16-capable 24 GB GPU (bf16), or with --device cpu fp32",
    )
    plan_parser.add_argument("--bf16", action="store_true", help="the same as --precision bf16")
    plan_parser.add_argument(
        "--budget_gib", "--budget", type=float, default=24.0, help="memory of the GPU in GiB (default 24)"
    )
    plan_parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="where it trains: kernels and masks differ"
    )
    plan_parser.add_argument(
        "--attn_implementation",
        choices=["auto", "flash_attention_2", "sdpa", "eager"],
        default="auto",
        help="the attention kernel to plan; auto (default): the recipe's choice here, flash_attention_2 on a CUDA GPU "
        "with flash-attn installed where the family has it, else sdpa (eager for DeBERTa and MPNet)",
    )
    plan_parser.add_argument(
        "--cuda_overhead_gib",
        type=float,
        default=DEFAULT_CUDA_OVERHEAD_GIB,
        help="CUDA context + cuBLAS workspace, outside PyTorch's allocator (an assumption; measure yours)",
    )
    plan_parser.add_argument(
        "--num_processes", type=int, default=1, help="processes (GPUs) training together (default 1)"
    )
    plan_parser.add_argument(
        "--sharding",
        choices=list(SHARDED_PARTS),
        default="none",
        help="what the processes shard: none (DDP), zero1, zero2, zero3 (DeepSpeed), fsdp_shard_grad_op, "
        "fsdp_full_shard; each process then holds 1/num_processes of those parts (recipes_workbench/planner/plan.py lists them)",
    )
    plan_parser.add_argument(
        "--paged_optimizer",
        action="store_true",
        help="paged 8-bit AdamW (adamw_8bit --paged_optimizer true): its state may page out to CPU memory while "
        "the activations need the room (GPU only; recipes_workbench/planner/plan.py says what is assumed)",
    )
    plan_parser.add_argument(
        "--base_bits",
        type=int,
        choices=[4, 8],
        help="bits of the quantized base, for the recipes with one (qlora): 4 (NF4, default) or 8 (LLM.int8)",
    )
    plan_parser.add_argument(
        "--optimizer_offload",
        action="store_true",
        help="DeepSpeed ZeRO-Offload (accelerate_configs/deepspeed_zero2_offload.yaml): optimizer state, fp32 "
        "master weights and gradients in CPU memory (GPU only)",
    )
