"""`recipes-lib push`: a finished run's output_dir to a model repository on the Hugging Face Hub.

    recipes-lib push outputs/demo/lora --repo_id my-name/minilm-tickets-lora [--private]

The model card (README.md) is written again first, with the repository's name in its loading code;
then the repository is made if it does not exist and the output_dir is uploaded, checkpoints left
out (tracking/hub.py). Without a token, in offline mode or without a network it stops with one line.
"""

from __future__ import annotations

import sys


def add_push_parser(commands) -> None:
    push_parser = commands.add_parser(
        "push",
        help="Upload a finished run (model or adapter, merged model, model card, results.json) to the Hub.",
        description="Push the output_dir of a finished run to a Hub model repository, made if missing. "
        "The model card is written again, naming the repository; checkpoints stay local.",
    )
    push_parser.add_argument("run_dir", help="the output_dir of a finished run (holding results.json)")
    push_parser.add_argument("--repo_id", required=True, help="the model repository, e.g. my-name/my-model")
    push_parser.add_argument(
        "--token", help="a Hub token with write access (default: HF_TOKEN or the one `hf auth login` saved)"
    )
    push_parser.add_argument(
        "--private", action="store_true", help="make the repository private if it is created"
    )


def push_command(args) -> int:
    from recipes_lib.errors import RecipeError
    from recipes_lib.tracking.hub import push_run

    try:
        url, files = push_run(args.run_dir, args.repo_id, token=args.token, private=args.private or None)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    print(f"Pushed {len(files)} files to {url}:")
    for name in files:
        print(f"  {name}")
    return 0
