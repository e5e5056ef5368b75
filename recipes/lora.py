"""LoRA: the encoder is frozen; low-rank adapters on the attention projections and the head train.

    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/lora.py
    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/lora.py --config recipes/configs/lora.yaml

Same defaults as full_ft.py except those SPEC sets below (learning rate 1e-3, not 2e-5; r=8, alpha=16,
dropout 0.1 on `query` and `value`); `--lora_target_modules all-linear` adapts every linear layer.
output_dir holds the adapter with the head; `--merge_adapter` also writes a plain model to
output_dir/merged. The lines marked NEW are what LoRA changes in full_ft.py.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_options import LoraArguments  # NEW
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adapters import add_lora, save_adapter_extras  # NEW
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, prepare, run_main
from recipes_lib.training.trainer import RecipeTrainer

# Parses ModelArguments, DataArguments, `options` and RecipeTrainingArguments; YAML and command line override:
SPEC = RecipeSpec(
    name="lora",  # NEW
    summary="frozen encoder; LoRA adapters and the head train",  # NEW
    options=LoraArguments,  # NEW: --lora_target_modules, --merge_adapter, ...
    training_defaults={
        "learning_rate": 1e-3,  # NEW: 0.3% of the weights train: far above 2e-5 (RESULTS.md, LoRA learning rate)
        "length_grouping": "stock",  # NEW: the wide grouping scored lower on 2 of 3 seeds (RESULTS.md, Small data)
        "lora_r": 8,  # NEW: rank of the update B A
        "lora_alpha": 16,  # NEW: the update is scaled by alpha / r = 2
        "lora_dropout": 0.1,  # NEW: on the adapters' input; targets: the family's query and value
    },
)


def main(argv=None):
    args = parse_arguments(SPEC, argv)  # typed, validated; never edited afterwards
    lora = args.options(LoraArguments)  # NEW
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        prepared = prepare(args)  # every decision made once; the data tokenized
        data, tokenizer, model_config = prepared.data.tokenized, prepared.tokenizer, prepared.model_config
        training_args = prepared.training_args
        run.start_tracking(prepared)  # the W&B run (offline without an API key); memory phases begin
        model = load_model(prepared.model_args, model_config)
        model = add_lora(model, prepared.adapters)  # NEW: a PeftModel; targets as prepare resolved them
        trainer = RecipeTrainer(  # transformers.Trainer plus safeguards (signals, NaN, complete checkpoints)
            model=model,
            args=training_args,
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=tokenizer,
            data_collator=padding_collator(tokenizer, args.data, training_args.device),
            compute_metrics=prepared.metrics,
            compute_loss_func=prepared.loss,  # --class_weights: weighted cross-entropy; None: the model's
            callbacks=run.callbacks(model),  # memory phases, tokens/s, precision, W&B curves, early stopping
        )
        run.clear_previous_run()  # --overwrite_output_dir: the old run is deleted here, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()
        merged = None  # NEW: --merge_adapter's model, scored in memory by write_results
        if run.is_main_process:  # NEW: config.json (label names) beside the adapter; --merge_adapter's model
            merged = save_adapter_extras(prepared.arguments, model_config, tokenizer, lora)  # NEW
        evaluation = run.final_evaluation(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, evaluation, prepared, merged)  # NEW: merged, scored


if __name__ == "__main__":
    run_main(main)
