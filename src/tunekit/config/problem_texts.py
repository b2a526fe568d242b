"""The English template of every problem the config's rules report: key → template (``config/problems.py``
:class:`~tunekit.config.problems.Said`). The web board says each again in Chinese (``webui/problems_zh.py``, the
same keys and placeholders; ``tests/webui/test_problems_zh.py`` holds them to it).

A LLaMA-Factory v1 config's refusals are in ``problem_texts_v1.py``, the memory planner's errors in
``problem_texts_plan.py``, a data file's and a record's errors in ``problem_texts_data.py`` (all part of
:data:`ENGLISH`). Keys of whole problems
name their rule; keys starting with ``part_`` are the pieces that vary in words. Option names,
values and paths are values (or written as they are), never translated.
"""

from __future__ import annotations

from ..env import ENV_ENGLISH
from ..messages import merged
from .problem_texts_api import ENGLISH_API
from .problem_texts_data import ENGLISH_DATA
from .problem_texts_export import ENGLISH_EXPORT, JOINS_EXPORT
from .problem_texts_infer import ENGLISH_INFER, JOINS_INFER
from .problem_texts_plan import ENGLISH_PLAN, JOINS_PLAN, RUNGS
from .problem_texts_predict import ENGLISH_PREDICT
from .problem_texts_run import ENGLISH_RUN, JOINS_RUN
from .problem_texts_v1 import ENGLISH_V1, JOINS_V1

_CONFIG: dict[str, str] = {
    # data (config/options/data.py)
    "part_pt_packing_default": " (on by default for pt)",
    "padding_free_packing": "padding_free and packing{default} are two ways to remove padding: choose one "
    "(padding_free: concatenate each micro-batch's samples, set packing: false; or packing, remove padding_free).",
    "batching_strategy_disagrees": "batching_strategy {strategy} (LLaMA-Factory's name) disagrees with padding_free "
    "{padding_free} / max_tokens_per_batch {budget}: keep batching_strategy alone, or use only tunekit's "
    "padding_free and max_tokens_per_batch.",
    "budget_kto": "max_tokens_per_batch is not supported for stage kto: its KL estimate is taken over each "
    "micro-batch, so batches of varying size would change the loss; remove max_tokens_per_batch (padding_free cuts "
    "kto's padding).",
    "budget_stage": "max_tokens_per_batch is for stages sft, pt, dpo and rm (stage is {stage}): remove "
    "max_tokens_per_batch.",
    "budget_below_pair": "max_tokens_per_batch {budget} is below 2 x cutoff_len {cutoff}: a {stage} pair is two "
    "sequences of up to cutoff_len tokens each and must fit one micro-batch; set max_tokens_per_batch to at least "
    "{least} (e.g. {example}) or lower cutoff_len.",
    "budget_below_cutoff": "max_tokens_per_batch {budget} is below cutoff_len {cutoff}: a sample of cutoff_len "
    "tokens could never fit a micro-batch; set max_tokens_per_batch to at least {cutoff} (e.g. {example}) or lower "
    "cutoff_len.",
    "budget_group_by_length": "max_tokens_per_batch forms its own batches (padded: by length already), "
    "group_by_length groups the sampler's: remove group_by_length.",
    "budget_too_large": "max_tokens_per_batch {budget:,} is more than {limit:,} (2**31 - 1) tokens in one "
    "micro-batch: use a smaller value.",
    "neat_packing_needs_packing": "neat_packing needs packing: set packing: true.",
    "neat_packing_pt": "neat_packing is for sft: pt packing cuts one continuous text into cutoff_len blocks, so "
    "there are no samples to keep apart; remove neat_packing.",
    "interleave_probs_concat": "interleave_probs is set but mix_strategy is concat: set mix_strategy: "
    "interleave_under or interleave_over.",
    "packing_stage": "packing is not supported for stage {stage}: remove packing (it is only for {stages}).",
    "padding_free_stage": "padding_free is not supported for stage {stage}: remove padding_free (it is only for "
    "{stages}).",
    "thought_weight_stage": "thought_loss_weight {weight:g} is for stage sft (stage is {stage}): {stage} scores or "
    "rewards each reply whole, thought included; remove thought_loss_weight.",
    "thought_weight_no_thinking": "thought_loss_weight {weight:g} with enable_thinking: false: no thought is "
    "trained (thoughts are removed and the empty <think></think> block is part of the prompt); remove "
    "thought_loss_weight or set enable_thinking: true.",
    "thought_weight_loss": "thought_loss_weight {weight:g} (a weighted thought) and {name} each compute their own "
    "token loss: remove one of them.",
    "dataset_empty_name": "{option} {text} has an empty name between commas: remove the extra comma.",
    "micro_batch_too_large": "{name} {batch} x cutoff_len {cutoff} = {tokens:,} tokens in one micro-batch, more "
    "than {limit:,} (2**31 - 1): kernels index a batch's elements with 32-bit integers and no device holds its "
    "activations; use a smaller {name} (and gradient_accumulation_steps for a larger effective batch).",
    # training (config/options/training.py)
    "output_is_loaded": "output_dir {output_dir} is the {name} folder {path} itself: the run would write its "
    "weights and files into the folder it loads; choose a new output_dir.",
    "max_steps_invalid": "max_steps {steps} is not a step count: use a positive number of optimizer steps, or -1 "
    "(the default) to train for num_train_epochs.",
    "warmup_steps_invalid": "warmup_steps {steps} is neither a fraction below 1 (a share of the steps) nor a whole "
    "step count: use e.g. 0.1 or 100.",
    "warmup_steps_and_ratio": "warmup_steps is a fraction (a ratio) and warmup_ratio is set too: keep one of them.",
    "neftune_stage": "neftune_noise_alpha (NEFTune) does not work in stage {stage}: {why}. Remove "
    "neftune_noise_alpha.",
    "part_neftune_rm": "the reward model's value-head wrapper has no input embeddings for transformers' hook",
    "part_neftune_ppo": "the value-head wrapper has no input embeddings for transformers' hook, and the rollouts' "
    "log-probs are taken without noise, so the policy ratio would compare noised with clean log-probs",
    "part_neftune_grpo": "the rollouts' log-probs are taken without noise, so the policy ratio would compare noised "
    "with clean log-probs",
    "neftune_reference": "neftune_noise_alpha (NEFTune) in stage {stage} with finetuning_type {method}: the "
    "reference is the policy with its adapter disabled, so its log-probs would be noised too. Set ref_model or "
    "precompute_ref_log_probs: true (that reference sees no noise), or remove neftune_noise_alpha.",
    "val_size_invalid": "val_size {size} is neither a fraction below 1 nor a whole sample count: use e.g. 0.1 or 100.",
    "val_size_and_eval_dataset": "val_size and eval_dataset are both set: evaluate on a held-out share (val_size) "
    "or on eval_dataset, not both.",
    "eval_needs_data": "eval_strategy '{strategy}' needs evaluation data: set val_size (e.g. 0.1) or eval_dataset, "
    "or set eval_strategy: no.",
    "best_needs_eval": "load_best_model_at_end needs evaluation: set eval_strategy: steps (and val_size or "
    "eval_dataset).",
    "best_needs_same_strategy": "load_best_model_at_end needs save_strategy equal to eval_strategy (now {save} vs "
    "{eval}).",
    "steps_invalid": "{name} {value:g} is neither a fraction below 1 (a share of the training steps) nor a whole "
    "step count: use e.g. {whole} or 0.1.",
    "best_needs_save_at_eval": "load_best_model_at_end needs a checkpoint at evaluations: save_steps {save:g} must "
    "be a multiple of eval_steps {every:g}{tail} (both whole step counts or both fractions below 1): set save_steps "
    "or eval_steps.",
    "part_eval_every_logging": " (logging_steps, eval_steps not set)",
    "plateau_needs_eval": "lr_scheduler_type reduce_lr_on_plateau lowers the learning rate when the evaluation loss "
    "stops improving, so it needs evaluation: set eval_strategy: steps (and val_size or eval_dataset), or choose "
    "another lr_scheduler_type.",
    "scheduler_takes_no_kwargs": "lr_scheduler_type {scheduler} takes no lr_scheduler_kwargs (Hugging Face ignores "
    "them): remove lr_scheduler_kwargs ({names}).",
    "scheduler_kwargs_wrong": "lr_scheduler_kwargs has {wrong}, which lr_scheduler_type {scheduler} does not take; "
    "{takes}",
    "part_scheduler_takes": "it takes: {allowed}.",
    "part_scheduler_takes_none": "it takes none: remove lr_scheduler_kwargs.",
    # optimizers (config/options/optimizers.py)
    "llama_pro_needs_freeze": "use_llama_pro trains only the expanded blocks, with finetuning_type: freeze in "
    "tunekit (now '{method}'; LoRA on the expanded blocks is not supported yet): set finetuning_type: freeze and "
    "freeze_trainable_layers to the number of added blocks.",
    "optimizers_several": "{custom} are all optimizers: choose one.",
    "optimizer_and_loraplus": "{name} and loraplus_lr_ratio each build the optimizer: choose one.",
    "projected_with_adapter": "{name} trains the full weights with less optimizer memory; it cannot be combined "
    "with finetuning_type '{method}' (adapters are small already): set finetuning_type: full or remove {name}.",
    "projection_sharded": "{name} keeps its projection per full weight matrix and does not run under {engine} "
    "(sharded weights): remove {option}, or use BAdam (use_badam) on one device.",
    "layerwise_accumulation": "{name} steps each weight inside backward, so gradients cannot be accumulated: set "
    "gradient_accumulation_steps: 1 (raise per_device_train_batch_size instead) or {name}: false.",
    "galore_optim": "use_galore works with optim adamw_torch (or adamw_8bit, adafactor), not {optim}: set optim: "
    "adamw_torch.",
    "apollo_optim": "use_apollo works with optim adamw_torch, not {optim}: set optim: adamw_torch.",
    "badam_ratio_clipping": "badam_mode: ratio updates sparse gradients, which torch's gradient clipping cannot "
    "norm: set max_grad_norm: 0 (or use badam_mode: layer).",
    "badam_fsdp": "use_badam does not run under FSDP: remove fsdp (BAdam runs on one device).",
    "badam_deepspeed": "use_badam does not run under DeepSpeed in tunekit: under ZeRO-3 badam's update was found to "
    "differ from its one-device update, and ratio mode does not support DeepSpeed at all. Remove deepspeed (BAdam "
    "is made to fully fine-tune a large model on one GPU), or use deepspeed with AdamW.",
    "pure_bf16_mixed": "pure_bf16 trains without autocast, so bf16/fp16 mixed precision must be off: remove "
    "bf16/fp16 (pure_bf16 loads the weights in bf16 itself).",
    "pure_bf16_dtype": "pure_bf16 loads the model in bfloat16, but dtype is {dtype}: remove dtype or set dtype: "
    "bfloat16.",
    "pure_bf16_zero3": "pure_bf16 does not run under DeepSpeed ZeRO-3 (it keeps its own fp32 master weights): use "
    "bf16: true, or a ZeRO-2 preset.",
    "fp8_msamp": "fp8_backend msamp is not supported: use fp8_backend: torchao (or auto) or te.",
    "fp8_quantization": "fp8 and quantization_bit cannot be combined (FP8 training computes in 8 bits; QLoRA stores "
    "a 4/8-bit base): remove one.",
    "fp8_all_gather_fsdp": "fp8_enable_fsdp_float8_all_gather needs fsdp: set fsdp: full_shard or remove it.",
    "sft_losses_several": "{custom} are alternative SFT losses: choose one.",
    "sft_loss_stage": "{name} is an SFT loss (stage sft), but stage is {stage}: set stage: sft or remove {name}.",
    # distributed (config/options/distributed.py)
    "fsdp_config_alone": "fsdp_config is read only when FSDP runs: set fsdp (e.g. fsdp: full_shard) or remove "
    "fsdp_config.",
    # cp_size (config/options/distributed.py: context_parallel_problems)
    "cp_stage": "cp_size {cp} splits each sequence over {cp} processes for the token loss of stage sft or pt; "
    "stage {stage} scores whole sequences (pairs, rewards or rollouts), which tunekit does not split. Remove "
    "cp_size, or train stage sft.",
    "cp_deepspeed": "cp_size {cp} runs Ulysses context parallelism under DDP or FSDP2; DeepSpeed's own sequence "
    "parallelism (ALST) is not wired in tunekit. Remove deepspeed (fsdp: full_shard shards the weights too) or "
    "cp_size.",
    "cp_eager": "cp_size {cp} attends over each gathered sequence with a causal mask alone, which eager attention "
    "(flash_attn: {value}) does not do: use flash_attn: sdpa (or auto, or fa2 on a GPU), or remove cp_size.",
    "cp_whole_sequence": "cp_size {cp} with {option}: it needs each whole sequence in one process (ASFT's reference "
    "model attends over it; NEFTune scales its noise by its length), which tunekit does not split. Remove one of "
    "them.",
    "cp_changes_attention": "cp_size {cp} with {option}: it changes the attention that context parallelism splits "
    "(virtual tokens before each sequence or in every layer's keys and values, or attention code of its own). Use "
    "lora, or remove cp_size.",
    "cp_batching": "cp_size {cp} splits plain padded rows that every process of a sequence group draws in the same "
    "order; {option} changes what a row holds or which rows go together. Remove {option} or cp_size.",
    "fsdp_wrap_needs_shard": "fsdp_transformer_layer_cls_to_wrap names the classes FSDP shards as units, so it "
    "needs fsdp: full_shard or shard_grad_op; set fsdp or remove fsdp_transformer_layer_cls_to_wrap.",
    # logging and multimodal (config/options/logging.py, multimodal.py)
    "trackers_unknown": "report_to names unknown tracker(s) {trackers}: use {known}.",
    "pixels_min_over_max": "{low} {lo} is larger than {high} {hi}: lower {low} or raise {high}.",
    "all_frozen": "freeze_vision_tower, freeze_multi_modal_projector and freeze_language_model are all true: "
    "nothing would be trained. Set freeze_language_model: false (the usual choice), or unfreeze the vision tower or "
    "projector.",
    # model (config/options/model.py)
    "checkpointing_disagree": "gradient_checkpointing and disable_gradient_checkpointing disagree: set only one of "
    "them.",
    "v1_kernels": "use_v1_kernels: true asks for LLaMA-Factory's v1 fused kernels (RMSNorm, RoPE, SwiGLU and MoE on "
    "Ascend NPUs), which tunekit does not have: remove it (or set false); for fused kernels on GPUs use "
    "enable_liger_kernel: true, and flash_attn: fa2 for FlashAttention-2.",
    "moe_aux_stage": "moe_aux_loss_coef adds the router loss to the language-model loss of stages sft and pt; stage "
    "{stage} computes its own loss without it: remove moe_aux_loss_coef.",
    "special_tokens_twice": "new_special_tokens_config and add_special_tokens both name special tokens to add: keep "
    "one (list every token in the YAML file, or remove new_special_tokens_config).",
    "desc_init_needs_config": "init_special_tokens: {value} starts each new token from its description, which only "
    "new_special_tokens_config gives: set new_special_tokens_config to a YAML file of `token: description` lines, "
    "or use init_special_tokens: noise_init.",
    # new_special_tokens_config's file (config/special_tokens.py)
    "special_tokens_file_missing": "new_special_tokens_config {path} does not exist (or is not a file): give the YAML "
    "file of `token: description` lines.",
    "part_special_tokens_nothing": "nothing (the file is empty)",
    "special_tokens_file_invalid": "new_special_tokens_config {path} is not valid YAML: {why}",
    "special_tokens_not_mapping": "new_special_tokens_config {path} must hold `token: description` lines (a mapping), "
    'found {kind}: write one line per new token, e.g. `"<|start_of_svg|>": "Marks the beginning of an SVG"`.',
    "special_tokens_empty_token": "new_special_tokens_config {path} names an empty or non-text token ({token}): "
    "every key must be the token's text (quote it); remove that line or write the token.",
    "special_tokens_description": "new_special_tokens_config {path}: the description of {token} is {kind}, not text: "
    'quote it (`{token}: "..."`) or write a sentence.',
    # export (config/options/export.py)
    "export_bnb_dataset": "export_quantization_dataset is GPTQ's calibration data, but export_quantization_method "
    "is bnb (data-free, it would not be used): remove export_quantization_dataset, or set "
    "export_quantization_method: gptq.",
    "gguf_type_needs_gguf": "export_gguf_type ({type}) applies to a GGUF export: set export_format: gguf, or remove "
    "export_gguf_type.",
    "gguf_safetensors_option": "{name} applies to a safetensors export; a GGUF export is one file quantized by "
    "llama.cpp: remove {name} and set export_gguf_type (f32, f16, bf16, q8_0, q4_k_m) instead.",
    # methods and switches (config/method_rules.py)
    "lora_only_one": "{names} is a LoRA option but finetuning_type is '{method}': remove it or set finetuning_type: "
    "lora.",
    "lora_only_many": "{names} are LoRA options but finetuning_type is '{method}': remove them or set "
    "finetuning_type: lora.",
    "freeze_only_one": "{names} is a freeze option but finetuning_type is '{method}': remove it or set "
    "finetuning_type: freeze.",
    "freeze_only_many": "{names} are freeze options but finetuning_type is '{method}': remove them or set "
    "finetuning_type: freeze.",
    "quantization_method": "quantization_bit {bits} trains a quantized base, which only works with LoRA (QLoRA) or "
    "OFT (QOFT): set finetuning_type: lora or oft, or remove quantization_bit.",
    "dora_pissa": "use_dora and pissa_init cannot be combined: choose one LoRA variant.",
    "pissa_convert_needs_init": "pissa_convert converts a PiSSA adapter to plain LoRA: set pissa_init: true, or "
    "remove pissa_convert.",
    "pissa_convert_target": "pissa_convert with additional_target: peft's conversion keeps only the LoRA matrices, "
    "so the trained {target} would be lost from the saved adapter; remove additional_target or pissa_convert.",
    "switch_off_one": "{names} only takes effect with {switch}: true: set {switch}: true or remove it.",
    "switch_off_many": "{names} only take effect with {switch}: true: set {switch}: true or remove them.",
    "oft_only_one": "{names} is an OFT option but finetuning_type is '{method}': set finetuning_type: oft or remove "
    "it.",
    "oft_only_many": "{names} are OFT options but finetuning_type is '{method}': set finetuning_type: oft or remove "
    "them.",
    "oft_sizes_zero": "oft_rank and oft_block_size are both 0: set one of them (e.g. oft_block_size: 32), and the "
    "other to 0.",
    "oft_sizes_both": "oft_rank {rank} and oft_block_size {block} are both set: peft derives one from the other; "
    "set the other to 0.",
    "part_method_ptuning": "P-Tuning v2",
    "part_method_prompt": "prompt tuning",
    "part_logprobs": "sequence log-probs",
    "part_last_score": "the last token's score",
    "part_prefix_checkpointing": "its prefix reaches every layer's attention as a KV cache, which transformers' "
    "checkpointed decoder layers drop (a layer replayed in backward would write its keys into the cache again), and "
    "peft refuses prefix tuning on a checkpointed model",
    "part_unfit_use_galore": "projects the gradients of the model's weight matrices",
    "part_unfit_use_apollo": "scales the gradients of the model's weight matrices",
    "part_unfit_use_badam": "trains the decoder layers block by block",
    "part_unfit_use_muon": "orthogonalises the updates of the decoder layers' weight matrices",
    "prompt_only_one": "{names} is a {name} option but finetuning_type is '{method}': set finetuning_type: {wanted} "
    "or remove it.",
    "prompt_only_many": "{names} are {name} options but finetuning_type is '{method}': set finetuning_type: "
    "{wanted} or remove them.",
    "prompt_rollouts": "stage {stage} with finetuning_type {method}: {stage} samples rollouts with the "
    "policy{critic}, which tunekit does for weight methods only ({name} is supported for {stages}); use "
    "finetuning_type lora for {stage}.",
    "part_critic": " and trains a critic beside it",
    "prompt_positions": "stage {stage} with finetuning_type prompt: prompt tuning puts num_virtual_tokens trained "
    "positions before every sequence, and {stage} reads {reads} at the sequence's own positions; use "
    "finetuning_type ptuning (its prefix adds no positions) or lora.",
    "prompt_loss_variant": "{name} with finetuning_type prompt: the loss variant weighs each input position's "
    "logits, and prompt tuning puts num_virtual_tokens positions before them; use finetuning_type ptuning or lora.",
    "prompt_packed_ptuning": "{option} with finetuning_type {method}: {name} gives every row one prefix, and peft "
    "does not keep the samples of a packed row apart (it shifts their position ids); set {option}: false.",
    "prompt_packed_prompt": "{option} with finetuning_type {method}: {name} gives every row one prefix, and peft "
    "does not keep the samples of a packed row apart (it drops their position ids); set {option}: false.",
    "prompt_optimizer_ptuning": "{option} with finetuning_type {method}: it {why}, and {name} trains none of them "
    "(only its prefix); remove {option}.",
    "prompt_optimizer_prompt": "{option} with finetuning_type {method}: it {why}, and {name} trains none of them "
    "(only its virtual tokens); remove {option}.",
    "ptuning_checkpointing": "gradient_checkpointing: true with finetuning_type ptuning: P-Tuning v2 trains without "
    "gradient checkpointing ({why}); remove gradient_checkpointing (auto is off for ptuning) or set it false. For "
    "less activation memory lower per_device_train_batch_size or cutoff_len, or use finetuning_type lora.",
    "reentrant_gc_off": "use_reentrant_gc: true chooses how gradient checkpointing recomputes, but checkpointing is "
    "off ({option}): remove use_reentrant_gc, or turn gradient checkpointing on.",
    "ptuning_checkpointing_layers": "gradient_checkpointing_layers with finetuning_type ptuning: P-Tuning v2 trains "
    "without gradient checkpointing ({why}), so no layer is checkpointed; remove gradient_checkpointing_layers.",
    # engines (config/engines.py)
    "fsdp_unknown_words": "fsdp: {value} has unknown word(s) {words}: use one of {strategies}, optionally followed "
    "by 'offload' (e.g. fsdp: full_shard offload).",
    "fsdp_one_strategy": "fsdp: {value} must name exactly one of {strategies}.",
    "fsdp_stage": "fsdp: {fsdp} is not supported for stage {stage} (a value head saved beside the model, or "
    "generation during training); fsdp runs the stages {stages}. Remove fsdp.",
    "fsdp_fp16": "fsdp with fp16 is not supported: FSDP2 keeps gradients sharded, so fp16's loss scaler would "
    "decide on each rank alone whether to skip a step. Use bf16 (FSDP2 computes in bf16, keeps fp32 master "
    "weights), or deepspeed for fp16.",
    "fsdp_predict": "do_predict with fsdp is not supported: generating from a sharded model needs every rank. "
    "Train, then run `tunekit predict` on the saved model.",
    # the schema (config/schema.py)
    "stage_needs_reward": "stage {stage} needs a reward: set reward_funcs (package.module:function) or reward_model "
    "(a folder saved by stage rm).",
    "bf16_and_fp16": "bf16 and fp16 are both true: choose one mixed-precision mode (bf16 on Ampere or newer GPUs, "
    "else fp16).",
    "deepspeed_and_fsdp": "deepspeed and fsdp are both set: choose one distributed engine.",
    "mask_history_train_on_prompt": "mask_history and train_on_prompt contradict each other: mask_history trains "
    "only the last answer, train_on_prompt trains everything.",
    # loading (config/loader.py, config/field_errors.py: pydantic's errors by type)
    "where_config": "config",
    "where_command_line": "on the command line",
    "where_form": "in the form",
    "where_file": "in {path}",
    "former_disagrees": "{former} ({value}, {where}) and {name} ({other}) disagree: they are one option ({former} "
    "is its former name); keep {name}.",
    "lf_unsupported": "`{option}` is a LLaMA-Factory option that tunekit does not support (yet) ({where}): remove "
    "it; `tunekit train --help` lists what tunekit supports.{why}",
    "gc_kwargs_other": "gradient_checkpointing_kwargs {value} ({where}): tunekit reads only use_reentrant: true or "
    "false from it (as use_reentrant_gc); remove the other keys.",
    "lf_unsupported_n": "{options} are LLaMA-Factory options that tunekit does not support (yet) ({where}): "
    "remove them; `tunekit train --help` lists what tunekit supports.{why}",
    "part_why_unsupported": " ({why}.)",
    "part_why_megatron": "Megatron-Core training (LLaMA-Factory's USE_MCA=1 with mcore_adapter, or Megatron-Bridge) "
    "is a GPU-only engine that tunekit does not have: for several GPUs use deepspeed (ZeRO 0-3) or fsdp "
    "(docs/workflows/multi-gpu.md)",
    "part_why_ktransformers": "KTransformers (LLaMA-Factory's use_kt: MoE experts computed by its CPU/GPU kernels) "
    "is a GPU-only engine that tunekit does not have: LoRA on an MoE model runs through transformers and peft "
    "(docs/moe.md)",
    "part_why_ray_storage_filesystem": "Ray's cloud storage: tunekit writes the checkpoints, logs and model to "
    "output_dir itself, and Ray keeps only its run records, in ray_storage_path (a local or shared folder)",
    "part_why_mixture_of_depths": "Mixture-of-Depths needs the mixture-of-depth package (LLaMA-Factory requires "
    ">=1.1.6), whose latest release, 1.2.0, imports what transformers 5 removed (TRANSFORMERS_CACHE, "
    "transformers.modeling_attn_mask_utils)",
    "unknown_option": "Unknown option {shown} ({where}).{tail}",
    "part_did_you_mean": " Did you mean: {names}?",
    "part_see_help": " See `tunekit train --help` for the options.",
    "bool_for_number": "Option '{option}' ({where}) got {value}, expected {expected}.",
    "bool_for_number_cli": "Option '{option}' ({where}) got {value}, expected {expected}: `--{option}` needs a "
    "value (`--{option} VALUE` or {option}=VALUE); a flag without one means true, which only true/false options "
    "take.",
    "option_invalid": "Option '{option}' ({where}) got {given} ({type}), expected {expected}: {detail}.",
    "type_float": "a number (float)",
    "type_int": "a whole number (int)",
    "type_bool": "true or false (bool)",
    "type_str": "text (str)",
    "pydantic_other": "{msg}",
    "pydantic_greater_than": "Input should be greater than {gt}",
    "pydantic_greater_than_equal": "Input should be greater than or equal to {ge}",
    "pydantic_less_than": "Input should be less than {lt}",
    "pydantic_less_than_equal": "Input should be less than or equal to {le}",
    "pydantic_multiple_of": "Input should be a multiple of {multiple_of}",
    "pydantic_literal_error": "Input should be {choices}",
    "pydantic_int_parsing": "Input should be a valid integer, unable to parse string as an integer",
    "pydantic_int_from_float": "Input should be a valid integer, got a number with a fractional part",
    "pydantic_int_type": "Input should be a valid integer",
    "pydantic_float_parsing": "Input should be a valid number, unable to parse string as a number",
    "pydantic_float_type": "Input should be a valid number",
    "pydantic_bool_parsing": "Input should be a valid boolean, unable to interpret input",
    "pydantic_bool_type": "Input should be a valid boolean",
    "pydantic_string_type": "Input should be a valid string",
    "pydantic_dict_type": "Input should be a valid dictionary",
    "pydantic_list_type": "Input should be a valid list",
    "pydantic_missing": "Field required",
    "pydantic_extra_forbidden": "Extra inputs are not permitted",
    "pydantic_finite_number": "Input should be a finite number (inf or nan makes the loss and every weight NaN)",
    "number_not_finite": "{where}{value} is not a finite number: a learning rate, coefficient or size of inf or nan "
    "makes the loss and every weight NaN; give a finite value",
    "number_too_large": "{where}{value} does not fit a 64-bit integer (at most {limit}), which torch and the data "
    "loader count with; give a realistic value",
    # an option's JSON file (config/jsonfile.py)
    "json_invalid": "{option}: {path} is not valid JSON ({error}).",
    "json_not_utf8": "{option}: {path} is not UTF-8 text (byte {byte}); it must be a JSON file.",
    "json_not_object": "{option}: {path} must hold a JSON object, found {kind}.",
    # the DeepSpeed file against the options (train/engines/deepspeed_config.py; the preflight and the board)
    "ds_unknown_preset": "Unknown DeepSpeed preset {name}: use one of {presets} or a path to a JSON file.",
    "ds_not_found": "deepspeed: {value} is neither a preset{hint} nor an existing JSON file.",
    "part_ds_preset_hint": " (a preset name: {presets})",
    "ds_zero_not_object": "deepspeed: 'zero_optimization' in {source} must be an object.",
    "ds_stage": "deepspeed: zero_optimization.stage in {source} must be 0, 1, 2 or 3, got {stage}.",
    "ds_batch_field": 'deepspeed: {key} in {source} must be a positive whole number or "auto", got {value}.',
    "ds_contradicts": "deepspeed: {source} contradicts tunekit's options in {count} place(s): {conflicts}. Set each "
    'of these fields to "auto" (recommended: tunekit\'s options fill them) or make both agree.',
    "part_ds_numbered": "({n}) {text}",
    "part_ds_micro": "train_micro_batch_size_per_gpu is {micro} but per_device_train_batch_size is {micro_batch}",
    "part_ds_accum": "gradient_accumulation_steps is {accum} but tunekit's gradient_accumulation_steps is "
    "{accumulation}",
    "part_ds_total": "train_batch_size {total} is not per_device_train_batch_size x gradient_accumulation_steps x "
    "world size = {micro} x {accum} x {world} = {product} (or use {fix})",
    "part_ds_fix_accum": "gradient_accumulation_steps: {per_rank}",
    "part_ds_fix_divisible": "a train_batch_size divisible by per_device_train_batch_size x world size ({micro} x "
    "{world})",
    "part_ds_field": "{key} is {given} but {option} is {mine}",
    "part_ds_autotp": "tensor_parallel.autotp_size is {tp} but the run has {world} process(es): AutoTP splits each "
    "layer over {tp} ranks (set NPROC_PER_NODE to a multiple of {tp}, or remove the tensor_parallel block)",
    "part_ds_optimizer": "its optimizer block would run instead of {optimizers} (remove the block to use {first})",
    # the board (webui/validation.py)
    "dataset_twice": "{option}: '{name}' is chosen twice, so a run would read its samples twice: pick each dataset "
    "once.",
    # the board's Save / Load of a config file (webui/board.py, webui/paths.py: config_file)
    "path_what_config_file": "Config file",
    "board_config_name": "Config file: give a file name, e.g. configs/run.yaml.",
    "board_config_suffix": "{what} '{value}' is refused: the board only {verb} .yaml, .yml or .json files.",
    "part_board_saves": "saves",
    "part_board_loads": "loads",
    "board_config_exists": "Config file {path} already exists: tick 'Overwrite' to replace it, or choose another "
    "name.",
    "board_config_folder": "Config file {path} is a folder, not a file: choose another name.",
    "board_config_missing": "Config file '{path}' does not exist.",
    "board_config_too_large": "Config file {path} is larger than {limit} kB: not a config.",
    "board_config_bad_json": "{path} is not valid JSON (line {line}, column {column}).",
    "board_config_bad_yaml": "{path} is not valid YAML{where}.",
    "part_board_line_column": " (line {line}, column {column})",
    "board_config_not_mapping": "{path} must hold a mapping of option: value, found {kind}.",
    "board_config_unknown": "{path}: {count} unknown option(s): {names}{more}. See `tunekit train --help` for the "
    "options.",
    "part_board_more": " ...",
    # the board's path policy (webui/paths.py)
    "path_what_option": "Option '{option}'",
    "path_what_dataset": "Option '{option}': dataset '{name}'",
    "path_what_key": "{what} {key}",
    "path_hidden": "{what} '{value}' is refused: the board does not read or write hidden files or folders "
    "('{hidden}'). Use a path without a part starting with '.'.",
    "path_outside": "{what} '{value}' is outside the folders this board may use ({roots}). Use a path inside "
    "them, or restart the board with --allow-path DIR (or --workspace DIR).",
    "path_remote_code": "Option '{option}' runs code named in the form, so the board refuses it; restart the "
    "board with --allow-remote-code to allow it, or run `tunekit train` from a shell.",
    "path_dataset_info": "{what}: {error}",
    "path_hub": "{what} {key} '{value}' {problem}: the board reads hub datasets by id only. Register a local file "
    "with file_name, inside the workspace.",
    "path_cloud": "{what} {key} is refused: the board does not read cloud files. Download the file into the "
    "workspace and register it with file_name.",
    # the board's one job at a time (webui/runner.py)
    "board_job_running": "a job is already running on this board: stop it or wait for it to finish",
    # USE_RAY=1's options (config/options/distributed.py)
    "ray_gpu_with_use_cpu": "resources_per_worker asks Ray for GPUs but use_cpu is true: remove GPU from "
    "resources_per_worker, or set use_cpu to false.",
}
ENGLISH: dict[str, str] = merged(
    _CONFIG,  # the config's rules and options (above)
    ENGLISH_V1,  # a LLaMA-Factory v1 config's refusals
    ENGLISH_PLAN,  # the memory planner's errors the board shows
    RUNGS,  # an auto-fit set-up's parts (also the planner's notes')
    ENGLISH_INFER,  # the inference engine's errors (the Chat tab, the API)
    ENGLISH_PREDICT,  # a predict run's errors (the Evaluate & predict tab)
    ENGLISH_API,  # the API server's media refusals
    ENGLISH_RUN,  # a training, export or config-reading job's errors (model/, train/, export/, config files)
    ENV_ENGLISH,  # a bad environment variable (env.py: NNODES, RANK, WORLD_SIZE)
    ENGLISH_DATA,  # a data file's and a record's errors (data/)
    ENGLISH_EXPORT,  # the export checks' problems (export/verify.py, export/gptq_check.py)
)

# placeholder → how a tuple of values is joined in English (a placeholder not named here takes no tuple)
JOINS: dict[str, str | tuple[str, str]] = {
    "options": (", ", " and "),
    "roots": ", ",
    "choices": (", ", " or "),
    "words": ", ",
    "strategies": ", ",
    "names": ", ",
    "trackers": ", ",
    "known": ", ",
    "custom": " and ",
    "wrong": ", ",
    "allowed": ", ",
    "stages": (", ", " and "),
    "presets": ", ",
    "conflicts": "; ",
    "optimizers": ", ",
    **JOINS_V1,
    **JOINS_PLAN,
    **JOINS_INFER,
    **JOINS_RUN,
    **JOINS_EXPORT,
}
