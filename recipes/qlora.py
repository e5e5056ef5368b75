"""QLoRA: LoRA on a frozen base whose linear layers are stored in 4-bit NF4 (bitsandbytes), or in 8 bits.

    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py
    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py --config recipes/configs/qlora.yaml

As lora.py, but the encoder's linear weights are NF4 with double quantization (4.13 bits per weight;
--base_bits 8: LLM.int8, 1 B), their matmuls in the run's precision. NEW marks what QLoRA changes.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_options import QloraArguments  # NEW
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adapters import (  # NEW
    add_lora,
    base_quantization_config,
    check_base_support,
    prepare_4bit_model,
    save_adapter_extras,
)
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, prepare, run_main
from recipes_lib.training.trainer import RecipeTrainer

# Parses ModelArguments, DataArguments, `options` and RecipeTrainingArguments; YAML and command line override:
SPEC = RecipeSpec(
    name="qlora",  # NEW
    summary="LoRA on a 4-bit NF4 base (--base_bits 8: an 8-bit LLM.int8 base)",  # NEW
    options=QloraArguments,  # NEW: lora.py's options and --base_bits
    training_defaults={
        "learning_rate": 1e-3,  # NEW: 0.3% of the weights train: far above 2e-5 (RESULTS.md, LoRA learning rate)
        "length_grouping": "stock",  # NEW: the wide grouping scored lower on 2 of 3 seeds (RESULTS.md, Small data)
        "lora_r": 8,  # NEW: rank of the update B A
        "lora_alpha": 16,  # NEW: the update is scaled by alpha / r = 2
        "lora_dropout": 0.1,  # NEW: on the adapters' input; targets: the family's query and value
        "base_bits": 4,  # NEW: NF4 with double quantization; 8: LLM.int8
    },
)


def main(argv=None):
    args = parse_arguments(SPEC, argv)  # typed, validated; never edited afterwards
    lora = args.options(QloraArguments)  # NEW
    check_base_support(args.training.device, lora.base_bits)  # NEW: they run here, before anything loads
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        prepared = prepare(args)  # every decision made once; the data tokenized
        data, tokenizer, model_config = prepared.data.tokenized, prepared.tokenizer, prepared.model_config
        training_args = prepared.training_args
        run.start_tracking(prepared)  # the W&B run (offline without an API key); memory phases begin
        qconfig = base_quantization_config(model_config, training_args.precision, lora.base_bits)  # NEW
        device_map = {"": training_args.device}  # NEW: quantized as the weights land there (they cannot move)
        model = load_model(
            prepared.model_args, model_config, quantization_config=qconfig, device_map=device_map
        )
        model = add_lora(prepare_4bit_model(model), prepared.adapters)  # NEW: frozen 4-bit base
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
        if run.is_main_process:  # NEW: config.json (label names) and the base's bits; the merged model
            merged = save_adapter_extras(  # NEW
                prepared.arguments, model_config, tokenizer, lora, qconfig
            )  # NEW
        evaluation = run.final_evaluation(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, evaluation, prepared, merged)  # NEW: merged, scored


if __name__ == "__main__":
    run_main(main)
