"""Full fine-tuning with bitsandbytes' 8-bit AdamW: every weight trains, the optimizer state shrinks 4x.

    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py
    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py --config recipes/configs/adamw_8bit.yaml

Same defaults as full_ft.py. AdamW's moments are stored block-wise in uint8: 2 x 1 B + 2 x 4 B of
absmax per 256 elements = 2.03 B per parameter instead of 8 B, for tensors of 4,096 elements or
more. nn.Embedding weights keep 32-bit state by default (bitsandbytes' advice). The lines marked
NEW are what this recipe changes in full_ft.py.
"""

from recipes_lib.config.adamw_8bit_options import Adam8bitArguments  # NEW
from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adamw_8bit import create_adamw_8bit  # NEW
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, prepare, run_main
from recipes_lib.training.trainer import RecipeTrainer

# Parses ModelArguments, DataArguments, `options` and RecipeTrainingArguments; YAML and command line override:
SPEC = RecipeSpec(
    name="adamw_8bit",  # NEW
    summary="every weight trains, bitsandbytes 8-bit AdamW",  # NEW
    options=Adam8bitArguments,  # NEW: --embedding_optimizer_bits, --paged_optimizer
    training_defaults={
        "learning_rate": 2e-5,  # AdamW's peak, warmed up over the first 6% of steps
        "embedding_optimizer_bits": 32,  # NEW: nn.Embedding keeps 32-bit state (bitsandbytes' advice)
    },
)


def main(argv=None):
    args = parse_arguments(SPEC, argv)  # typed, validated; never edited afterwards
    options = args.options(Adam8bitArguments)  # NEW
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        prepared = prepare(args)  # every decision made once; the data tokenized
        data, tokenizer, model_config = prepared.data.tokenized, prepared.tokenizer, prepared.model_config
        training_args = prepared.training_args
        run.start_tracking(prepared)  # the W&B run (offline without an API key); memory phases begin
        model = load_model(prepared.model_args, model_config)
        optimizer = create_adamw_8bit(  # NEW: bitsandbytes AdamW8bit, the Trainer's weight-decay groups
            model, training_args, options.embedding_optimizer_bits, paged=options.paged_optimizer
        )  # NEW
        trainer = RecipeTrainer(  # transformers.Trainer plus safeguards (signals, NaN, complete checkpoints)
            model=model,
            args=training_args,
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=tokenizer,
            data_collator=padding_collator(tokenizer, args.data, training_args.device),
            optimizers=(optimizer, None),  # NEW: the Trainer builds the learning-rate schedule
            compute_metrics=prepared.metrics,
            compute_loss_func=prepared.loss,  # --class_weights: weighted cross-entropy; None: the model's
            callbacks=run.callbacks(model),  # memory phases, tokens/s, precision, W&B curves, early stopping
        )
        run.clear_previous_run()  # --overwrite_output_dir: the old run is deleted here, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()
        evaluation = run.final_evaluation(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, evaluation, prepared)


if __name__ == "__main__":
    run_main(main)
