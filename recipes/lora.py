"""LoRA: the encoder is frozen; low-rank adapters on the attention projections and the head train.

    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/lora.py
    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/lora.py --config recipes/configs/lora.yaml

Same defaults as full_ft.py except the learning rate, 1e-3 instead of 2e-5. r=8, alpha=16,
dropout 0.1 on `query` and `value`; `--lora_target_modules all-linear` adapts every linear layer.
output_dir holds the adapter with the head; `--merge_adapter` also writes a plain model to
output_dir/merged. The lines marked NEW are what LoRA changes in full_ft.py.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adapters import add_lora, save_adapter_extras  # NEW
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, prepare, run_main
from recipes_lib.training.trainer import RecipeTrainer

SPEC = RECIPES["lora"]  # NEW: its options (--lora_r, --lora_target_modules, ...), learning rate 1e-3


def main(argv=None):
    args = parse_arguments(SPEC, argv)
    lora = args.options(SPEC.options)  # NEW
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        prepared = prepare(args, SPEC)  # every decision made once; the data tokenized
        data, tokenizer, model_config = prepared.data.tokenized, prepared.tokenizer, prepared.model_config
        training_args = prepared.training_args
        run.start_tracking(prepared)  # the W&B run (offline without an API key); memory phases begin
        model = load_model(prepared.model_args, model_config)
        model = add_lora(model, lora)  # NEW: a PeftModel; the encoder frozen, adapters and the head train
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
        metrics = run.final_metrics(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics, prepared, merged)  # NEW: merged, scored


if __name__ == "__main__":
    run_main(main)
