"""QLoRA: LoRA on a frozen base whose linear layers are stored in 4-bit NF4 (bitsandbytes), or in 8 bits.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py --config recipes/configs/qlora.yaml
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py --base_bits 8

Everything as in lora.py (same options, learning rate and saved adapter), but the encoder's linear
weights are NF4 with double quantization (4.13 bits per weight), their matmuls in the run's precision
(bf16 on GPUs that have it natively, fp16 on older ones, fp32 on CPUs). --base_bits 8 loads the base
in bitsandbytes' LLM.int8 instead (1 B per weight). NEW marks what QLoRA changes.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adapters import (  # NEW
    add_lora,
    base_quantization_config,
    check_base_support,
    prepare_4bit_model,
    save_adapter_extras,
)
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, run_main
from recipes_lib.training.trainer import RecipeTrainer

SPEC = RECIPES["qlora"]  # NEW: lora.py's options and --base_bits, learning rate 1e-3


def main(argv=None):
    # Arguments: model, data and training dataclasses; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    lora = args.options(SPEC.options)  # NEW
    check_base_support(args.training.device, lora.base_bits)  # NEW: they run here, before anything loads
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        # Data: a DatasetDict (train, validation, test if given), labels as ids, tokenized and cached
        data = run.load_data()
        run.start_tracking()  # the W&B run starts here (offline without an API key); memory phases begin
        # Model: AutoModelForSequenceClassification, a new head for these labels
        quantization = base_quantization_config(run.model_config, run.precision, lora.base_bits)  # NEW
        device_map = {"": args.training.device}  # NEW: quantized as the weights land there (they cannot move)
        model = load_model(
            run.model_args, run.model_config, quantization_config=quantization, device_map=device_map
        )
        model = add_lora(prepare_4bit_model(model), lora)  # NEW: frozen quantized base; adapters, head train
        training_args = run.resolve(args.training)  # a copy: the family's precision, auto batch size
        trainer = RecipeTrainer(  # transformers.Trainer plus safeguards (signals, NaN, complete checkpoints)
            model=model,
            args=training_args,  # what the Trainer gets; args.training stays as parsed
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=run.tokenizer,
            data_collator=padding_collator(run.tokenizer, args.data, training_args.device),
            compute_metrics=run.compute_metrics,  # the task's metrics, from evaluate modules
            compute_loss_func=run.compute_loss,  # --class_weights: weighted cross-entropy; else the model's
            callbacks=run.callbacks(model),  # memory phases, tokens/s, precision, W&B curves, early stopping
        )
        run.clear_previous_run()  # --overwrite_output_dir: the old run is deleted here, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()  # the model and tokenizer in output_dir
        merged = None  # NEW: --merge_adapter's model, scored in memory by write_results
        if run.is_main_process:  # NEW: config.json (label names) and the base's bits; the merged model
            merged = save_adapter_extras(run.arguments, run.model_config, run.tokenizer, lora, quantization)
        metrics = run.final_metrics(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics, merged)  # NEW: merged, scored


if __name__ == "__main__":
    run_main(main)
