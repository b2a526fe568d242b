"""The English templates of the errors a training, export or config-reading job fails with (``model/loader.py``,
``model/expand.py``, ``train/run.py``, ``train/resume.py``, ``train/checkpoints.py``, ``train/preflight.py``,
``train/stages/``, ``train/engines/``, ``export/``, ``config/files.py``, ``config/loader.py``, ``model/finetuning.py``,
``model/prompt_adapters.py``, ``infer/metrics.py``, the ``tunekit`` commands a board job runs,
``serve/server.py``): key → template, part of :data:`tunekit.config.problem_texts.ENGLISH`. The board says each
again in Chinese (``webui/problems_zh_run.py``); the CLI says the English, word for word what these errors said before
they were keyed.

Paths, option names, environment variables and a library's own words (``{error}``, ``{why}``) are values, as they
are; keys starting with ``part_`` are the pieces that vary in words.
"""

from __future__ import annotations

ENGLISH_RUN: dict[str, str] = {
    # the model folder and its files (model/loader.py)
    "model_path_unset": "{option} is not set: give a local model folder or a hub id (e.g. "
    "Qwen/Qwen2.5-0.5B-Instruct).",
    "model_folder_missing": "Model folder {path} does not exist ({option}). Check the path, or use a hub id like "
    "Qwen/Qwen2.5-0.5B.",
    "model_path_is_file": "{option} {path} is a file, not a model folder: give the folder that holds config.json and "
    "the weights{parent}.",
    "part_model_parent": " (the folder {path})",
    "model_is_adapter": "{path} is a LoRA adapter folder (adapter_config.json), not a model: set {option} to its base "
    "model ({base}) and adapter_name_or_path: {path}.",
    "part_the_base_model": "the base model",
    "model_no_config": "{path} has no config.json: it is not a Hugging Face model folder.",
    "model_config_not_utf8": "{file} is not UTF-8 text (byte {byte}): it is not a model config; re-download or "
    "re-save the model.",
    "model_config_bad_json": "{file} is not valid JSON (line {line}, column {column}: {error}); re-download the model "
    "or fix the file.",
    "model_config_not_object": "{file} must hold a JSON object, found {kind}; re-download the model.",
    "model_no_weights": "{path} has config.json but no weights (model.safetensors, model-*-of-*.safetensors or "
    "pytorch_model.bin): copy the weight files into it, or point model_name_or_path at the full model.",
    "model_bad_safetensors": "{file} is not a readable safetensors file ({error}): it is truncated or corrupted; "
    "re-download or re-save the model.",
    "model_truncated_zip": "{file} is a truncated PyTorch checkpoint (its zip directory is missing); re-download or "
    "re-save the model.",
    "model_not_checkpoint": "{file} is not a PyTorch checkpoint (it starts with {head}, neither zip nor pickle); "
    "re-download or re-save the model.",
    "model_hub_unloadable": "Could not load '{path}' ({why}). Download it while online (huggingface-cli download "
    "{path}) or point model_name_or_path at a local folder.",
    "part_hub_offline_uncached": "HF_HUB_OFFLINE is set and it is not in the local cache",
    "model_config_invalid": "{where} is not a valid configuration ({why}); fix that field or re-download the model's "
    "config.json.",
    "part_config_of": "the config.json of {path}",
    "model_tokenizer_code": "{path} ships its own tokenizer code; set trust_remote_code: true if you trust it.",
    "model_tokenizer_unloadable": "Could not load the tokenizer of {path} ({error}); copy the base model's tokenizer "
    "files into it.",
    "model_no_tokenizer_files": "{path} has no tokenizer files ({files}, ...): the tokenizer loaded from it has "
    "{count}, so nothing could be learned. Copy the tokenizer files of the model it was made from into {path}.",
    "part_one_token": "{size} token",
    "part_tokens": "{size} tokens",
    "model_no_model_type": "{file} has no model_type: transformers cannot tell the architecture; re-download the "
    "model's config.json.",
    "model_code": "{path} needs its own modelling code; set trust_remote_code: true if you trust it.",
    "model_config_unusable": "{file} cannot be used ({error}); check that it is this model's config (model_type, "
    "architecture fields).",
    "model_fa2_package": "flash_attn: fa2 needs the flash-attn package (pip install flash-attn --no-build-isolation) "
    "and an NVIDIA GPU; or use flash_attn: sdpa.",
    "model_fa2_no_gpu": "flash_attn: fa2 needs an NVIDIA GPU and none is visible; use flash_attn: sdpa on this "
    "machine.",
    "model_rope_no_positions": "rope_scaling: this model's config has no max_position_embeddings to scale from.",
    "model_liger_package": "enable_liger_kernel needs the liger-kernel package (pip install liger-kernel) and a GPU.",
    "model_liger_no_gpu": "enable_liger_kernel needs a GPU (Liger's kernels are Triton GPU kernels); none is visible. "
    "Remove the option on CPU.",
    "model_unsloth_missing": "use_unsloth needs the unsloth package and an NVIDIA GPU; remove it on this machine.",
    "model_unsloth_unwired": "use_unsloth is not wired into tunekit yet; remove it (enable_liger_kernel gives fused "
    "kernels on GPUs).",
    "model_weights_mismatch": "the weights in {path} do not belong to its config.json's architecture "
    "({architecture}): {parts}. Check that config.json and the weight files come from the same model, or set "
    "allow_new_weights: true if the difference is intended.",
    "part_weights_missing": "{count} weights it needs are missing and would start random (e.g. {names})",
    "part_weights_unexpected": "{count} weights in the folder have no place in it and would be dropped (e.g. {names})",
    "part_weights_both": "{missing}; {unexpected}",
    "model_weights_unloadable": "Could not load the weights in {path} ({error}).",
    "model_weights_shapes": "the weights in {path} do not belong to its config.json's architecture ({architecture}): "
    "some have other shapes than the config gives them (transformers' load report above lists them). Check that "
    "config.json and the weight files come from the same model.",
    "model_pickles_unreadable": "{files} in {path} cannot be read as weights ({kind}): truncated, corrupted, or a "
    "pickle that needs code to run, which tunekit never does (weights-only loading). Re-download it, or re-save the "
    "model as safetensors where it was made.",
    "model_attention_refused": "flash_attn: {value} cannot load {path}: transformers says '{said}'. Use flash_attn: "
    "auto (transformers' own choice for this model) or eager.",
    # LLaMA Pro block expansion (model/expand.py)
    "expand_layers_divide": "use_llama_pro: freeze_trainable_layers {count} (the expanded blocks) must divide the "
    "model's {layers} layers; expand with tunekit expand-blocks --num-expand N and use that N.",
    "expand_out_not_empty": "{path} is not empty: choose a new folder for the expanded model.",
    "expand_no_layers": "{path}/config.json has no num_hidden_layers: cannot expand its blocks.",
    "expand_num_divide": "--num-expand {count} must divide the {layers} layers of {path} (e.g. {divisors}).",
    "expand_unmapped": "expanding {path}: parameters not mapped (missing {missing}, unexpected {unexpected}); this "
    "architecture's blocks are not under '*.layers.N.'.",
    # the run's folder and stage (train/run.py, train/preflight.py)
    "run_stage_unavailable": "stage '{stage}' is not available yet; available stages: {names}.",
    "run_output_unset": "output_dir is not set: name the folder for the model, checkpoints and logs.",
    "run_output_is_file": "output_dir {path} is a file, not a folder.",
    "run_output_not_empty": "output_dir {path} is not empty ({shown}). Set overwrite_output_dir: true to write into "
    "it, resume_from_checkpoint: true to continue that run, or choose a new output_dir.",
    "run_dataset_unset": "dataset is not set: name one or more datasets from dataset_info.json (dataset: a,b) or give "
    "a file path.",
    # resuming (train/resume.py)
    "resume_other_options": "{what} belongs to a run with other training options ({path}): {diffs}. Continuing it "
    "with this config would mix two runs. Use that run's values, or start a new run (another output_dir, or "
    "overwrite_output_dir: true without resume_from_checkpoint).",
    "part_resume_checkpoint": "checkpoint {path}",
    "part_resume_finished_run": "the finished run in {path}",
    "part_resume_run": "the run in {path}",
    "resume_none_complete": "resume_from_checkpoint: true found no complete checkpoint in {path}{torn}. Remove "
    "resume_from_checkpoint to start from scratch, or use resume_from_checkpoint: auto.",
    "part_resume_diff": "{key}: {there} there, {here} here",
    "part_resume_diff_batch": "global batch (per_device_train_batch_size x gradient_accumulation_steps x processes): "
    "{micro} x {accum} x {world} = {there} there, {micro_here} x {accum_here} x {world_here} = {here} here",
    "part_resume_torn": " ({checkpoints})",
    # why a checkpoint cannot be resumed (train/checkpoints.py: checkpoint_problem, newest_complete)
    "part_ckpt_no_marker": "it has no {file} (the run was probably killed while saving it)",
    "part_ckpt_marker_unreadable": "its {file} is unreadable",
    "part_ckpt_file_missing": "{name} is missing",
    "part_ckpt_file_size": "{name} has {size} bytes, {saved} when it was saved",
    "part_ckpt_checksum": "{name} does not match its checksum in {file} (its content changed after the save)",
    "part_ckpt_passed": "{name} ({problem})",
    "resume_auto_foreign": "resume_from_checkpoint: auto found no checkpoint and no {file} in output_dir {path}, "
    "which is not empty ({shown}): it is not a tunekit run's folder. Choose a new output_dir, or set "
    "overwrite_output_dir: true to write into it.",
    "resume_not_checkpoint": "resume_from_checkpoint {path} is not a checkpoint folder (no trainer_state.json).",
    "resume_damaged": "checkpoint {path} is incomplete or damaged: {problem}.{good}",
    "part_resume_good": " The newest good one is {path}.",
    "resume_without_deepspeed": "checkpoint {path} was written without DeepSpeed, which cannot load its optimizer "
    "state. Resume without deepspeed, {fresh}.",
    "resume_needs_deepspeed": "checkpoint {path} was written by DeepSpeed (its optimizer state is in DeepSpeed's "
    "global_step* files) and this run has no deepspeed: transformers would restart the optimizer without a word. "
    "Resume with the same deepspeed setting, {fresh}.",
    "part_resume_fresh": "or start a new run from its weights ({option}: {path}, without resume_from_checkpoint; the "
    "optimizer state and the learning-rate schedule then start afresh)",
    "resume_zero_world": "checkpoint {path} is a DeepSpeed ZeRO checkpoint written by {written}, and this run has "
    "{current}: ZeRO splits the optimizer state between the processes and DeepSpeed cannot split it again for another "
    "number. Resume with {written} (NPROC_PER_NODE x NNODES = {count}), {fresh}. DDP checkpoints (no deepspeed) "
    "resume with any number of processes.",
    "part_one_process": "{count} process",
    "part_processes": "{count} processes",
    # the stages (train/stages/)
    "ref_precompute_zero3": "precompute_ref_log_probs with LoRA under DeepSpeed ZeRO-3 is not supported: the "
    "reference is the policy with its adapter disabled, which DeepSpeed shards only when training starts. Remove "
    "precompute_ref_log_probs (the LoRA reference needs no second copy of the model) or use deepspeed: z2.",
    "rm_padding_free_vlm": "padding_free is not supported for stage rm with a vision-language model ({family} "
    "family): its media inputs are built per padded row. Remove padding_free.",
    "reward_import": "reward_funcs: cannot import '{name}' ({error}); write it as package.module:function and make "
    "sure the module is importable (on PYTHONPATH).",
    "reward_not_function": "reward_funcs: '{name}' is not a function.",
    "reward_count": "reward function {name} returned {count} rewards for {n} completions.",
    "value_head_missing": "{path} has no {file}: it is not a reward model saved by tunekit (stage rm).",
    # the launcher's environment (train/engines/launcher.py)
    "launch_not_whole": "{name}={value} is not a whole number.",
    "launch_too_small": "{name}={value} must be at least {minimum}.",
    "launch_node_rank": "NODE_RANK={rank} must be below NNODES={nodes} (nodes count from 0).",
    "launch_too_many_procs": "NPROC_PER_NODE={nproc} but only {devices} GPU(s) are visible (CUDA_VISIBLE_DEVICES="
    "{visible}): lower NPROC_PER_NODE or make more devices visible.",
    "launch_master_addr": "NNODES={nodes}: set MASTER_ADDR to the address of the NODE_RANK=0 machine, the same on "
    "every node (and MASTER_PORT, default {port}).",
    "launch_bad_port": "MASTER_PORT={port} is not a TCP port (1-65535).",
    "launch_port_in_use": "MASTER_PORT {port} is already in use on this machine (another training run, or a stale "
    "one still running?): choose another port, e.g. MASTER_PORT={free}, or unset MASTER_PORT on a single machine to "
    "let tunekit pick a free one.",
    # the distributed engines (train/engines/distributed.py)
    "dist_world_size": "world size {world} must be at least 1.",
    # Ulysses context parallelism (train/engines/ulysses.py)
    "cp_world": "cp_size {cp} splits each sequence over {cp} processes, but this run has {world} process(es): start "
    "a multiple of {cp} (FORCE_TORCHRUN=1 with NPROC_PER_NODE, or torchrun --nproc_per_node), or remove cp_size.",
    "cp_media": "cp_size {cp}: {model} takes media whose features are placed by token position in the whole "
    "sequence; tunekit's context parallelism splits text-only models. Remove cp_size.",
    "cp_heads": "cp_size {cp} gives each process 1/{cp} of the attention heads, but the model has {heads} query and "
    "{kv} key/value heads: cp_size must divide both (here: {fits}). Change cp_size (and the processes) or remove it.",
    "cp_layer_types": "cp_size {cp}: the model has {types} layers, which mix tokens outside the attention that "
    "context parallelism splits; it covers models whose layers are all full attention. Remove cp_size.",
    "cp_attention": "cp_size: context parallelism wraps sdpa or flash attention, but the model runs {attention} "
    "attention: set flash_attn: sdpa (or fa2 on a GPU), or remove cp_size.",
    "cp_batch_keys": "cp_size {cp}: the micro-batch holds {keys}, which context parallelism cannot split (it splits "
    "the input_ids, attention_mask and labels of plain padded rows): remove cp_size or what adds them.",
    "cp_left_padding": "cp_size {cp}: a micro-batch has padding before its tokens; context parallelism masks the "
    "gathered sequence causally, which is exact for right padding only. Remove cp_size.",
    "dist_wrap_twice": "fsdp_transformer_layer_cls_to_wrap and fsdp_config's transformer_layer_cls_to_wrap are both "
    "set: keep one of them.",
    "dist_fsdp_config_missing": "fsdp_config: {path} does not exist.",
    "dist_fsdp_activation": "fsdp_config: {path}: use the option gradient_checkpointing: true instead of "
    "activation_checkpointing.",
    "dist_fsdp_unknown_keys": "fsdp_config: {path} has key(s) tunekit does not use: {keys}. tunekit applies FSDP2 "
    "itself and reads only {known}.",
    "dist_fsdp_version": "fsdp_config: {path}: tunekit runs FSDP2 (version 2); FSDP1 is deprecated in transformers. "
    "Remove 'version'.",
    "dist_deepspeed_cpu": "deepspeed with use_cpu: true is not supported on a GPU machine: remove use_cpu, or hide "
    "the GPUs (CUDA_VISIBLE_DEVICES=) to run DeepSpeed on its CPU accelerator.",
    # exporting (export/)
    "export_dir_unset": "export_dir is not set: name the folder to write the exported model to.",
    "export_dir_is_source": "export_dir {path} is the model or adapter folder itself: choose a new folder.",
    "export_dir_is_file": "export_dir {path} is a file, not a folder.",
    "export_dir_foreign": "export_dir {path} holds weights that tunekit did not export ({files}; no {marker}): "
    "exporting would delete them. Choose a new or empty folder, or remove those files first.",
    "export_verify_failed": "the export in {path} failed verification: {problems}",
    "export_push_failed": "pushing {path} to the hub as {repo} failed ({error}); log in with `huggingface-cli login` "
    "and check the network. The export itself is in {path}.",
    "zero_unreadable": "{path} is not a readable torch checkpoint file ({kind}: {error}); the ZeRO checkpoint is "
    "damaged or incomplete.",
    "zero_pickle_code": "{path} refused: loading it would run code from the file. Its pickle names {names}, which a "
    "DeepSpeed ZeRO checkpoint does not contain (allowed besides tensors and plain data: {allowed}). If you trust "
    "whoever wrote this checkpoint, consolidate it explicitly with `tunekit zero-to-fp32 {folder} OUT_DIR "
    "--trust-pickle` (runs that code) and use OUT_DIR as model_name_or_path.",
    "zero_unsafe": "{path} could not be read safely ({kind}: {error}); the ZeRO checkpoint is damaged, or written by "
    "a DeepSpeed version whose file layout tunekit does not know (add --trust-pickle only if you trust its source).",
    "zero_not_model_states": "{path} is not a DeepSpeed model-states file (no '{buffers}'/'module' entries).",
    "zero_not_optim_states": "{path} is not a DeepSpeed ZeRO optimizer-states file (no '{entry}' entry).",
    "zero_partial": "{path} holds {count} *_optim_states.pt files but was written by {world} processes: the "
    "checkpoint is incomplete (a process did not save, or an older checkpoint was overwritten).",
    "zero_unknown_stage": "{path}: unknown ZeRO stage {stage}.",
    "zero_damaged": "the ZeRO-{stage} states in {path} are incomplete or damaged ({kind}: {error}); re-save the "
    "checkpoint or use an earlier one.",
    "zero_not_checkpoint": "{path} is not a DeepSpeed ZeRO checkpoint: it has no global_step*/ folder with "
    "*_model_states.pt files (and no 'latest' file naming one).",
    "zero_no_config": "{path} has ZeRO weights but no config.json; copy the model's config.json into it (the weights "
    "alone do not say which architecture they belong to).",
    "zero_needs_deepspeed": "consolidating a ZeRO checkpoint needs deepspeed: pip install 'tunekit[deepspeed]'.",
    "zero_misfit": "the ZeRO states of {path} do not fit its config.json (missing: {missing}, unexpected: "
    "{unexpected}): was it saved from a PEFT/LoRA model? Adapters are saved as adapter_model.safetensors next to the "
    "checkpoint; export those with adapter_name_or_path.",
    "gptq_no_calibration": "export_quantization_dataset {value} gave no calibration text: none of its records reads "
    "as a conversation or a plain text (see docs/data-formats.md). Nothing was written.",
    "gptq_runner_failed": "GPTQ quantization ({command}) failed with exit code {code}:\n{tail}",
    "gptq_runner_no_result": "the GPTQ runner ended without its result line; its output:\n{tail}",
    "gptq_groups": "{path}/config.json: expected one quantization group, found {count}",
    "gptq_check_failed": "the GPTQ export in {path} failed its check: {problems}",
    # a config file (config/files.py)
    "cfgfile_key_twice_at": "{path}: key {key} is given twice ({where}); keep one of them.",
    "part_cfgfile_lines": "lines {line} and {line2}",
    "part_cfgfile_columns": "line {line}, columns {column} and {column2}",
    "cfgfile_alias_bomb": "{path} expands to more than {limit:,} YAML nodes through its aliases (*name) (line "
    "{line}); a config needs only a few dozen: write the values out.",
    "cfgfile_alias_loop": "{path}: a YAML alias refers to itself (line {line}); remove the recursion.",
    "cfgfile_key_twice": "{path}: key {key} is given twice; keep one of them.",
    "cfgfile_is_folder": "Config file {path} is a folder, not a file: give the YAML or JSON file inside it.",
    "cfgfile_missing": "Config file {path} does not exist.",
    "cfgfile_not_utf8": "{path} is not UTF-8: byte {byte} (line {line}: {bytes}) cannot be decoded. Save the config "
    "as UTF-8, e.g. `iconv -f <ENCODING> -t UTF-8`.",
    "cfgfile_invalid": "{path} is not valid {kind}: {why}",
    "cfgfile_empty": "{path} holds no options (it is empty or only comments): write the run's options into it as "
    "`option: value` lines (see `tunekit train --help`).",
    "cfgfile_not_mapping": "{path} must hold a mapping of option: value, found {kind}.",
    # the command line (config/loader.py)
    "args_no_name": "Argument {arg} has no option name; write it as --option value.",
    "args_no_name_before_equals": "Argument {arg} has no option name before '='; write it as option=value (e.g. "
    "learning_rate=1e-4).",
    "args_unexpected": "Unexpected argument {arg}: options are written key=value or --key value (a config file must "
    "come first).",
    "args_folder_is_file": "{option} {path}: {existing} is a file, not a folder; choose another {option}.",
    "args_folder_unwritable": "{option} {path} cannot be written ({error} in {existing}); choose a folder you can "
    "write to.",
    # adapters and the fine-tuning method (model/finetuning.py, model/prompt_adapters.py)
    "adapter_unloadable": "Adapter {path} could not be loaded: {error}",
    "adapter_resume_unloadable": "Adapter {path} could not be loaded to continue training: {error}",
    "ft_layers_unknown": "Cannot tell how many layers this model has (no num_hidden_layers in config.json); use "
    "finetuning_type lora or full.",
    "ft_freeze_modules_missing": "freeze_trainable_modules names {missing}, which the layers do not have; available: "
    "{available}.",
    "ft_lora_rank_too_large": "lora_rank {rank} is larger than any adapted layer can use: a LoRA update of a d_in x "
    "d_out layer has rank at most min(d_in, d_out), and the adapted layers are {widths} (in x out); set lora_rank to "
    "at most {usable}.",
    "part_ft_shapes": "{shapes}{more}",
    "part_ft_more_shapes": " and {count} more",
    "ft_oft_block_divides": "{option} {value} does not divide the input width of every adapted layer (widths "
    "{widths}; not {bad}): peft would change it layer by layer. Set {option} to a divisor of all of them ({fits}), "
    "or narrow oft_target.",
    "ft_pissa_not_kept": "pissa_convert: the initial PiSSA adapter was not kept (the model was not built with "
    "pissa_init and pissa_convert by tunekit); cannot convert the adapter to plain LoRA.",
    "prompt_adapter_not_last": "adapter_name_or_path: {path} is a {kind} adapter, which cannot be merged into the "
    "weights, so it must be the last adapter listed: move it to the end, or drop the ones after it.",
    "ptuning_latent_attention": "finetuning_type ptuning cannot train {model_type}: its multi-head latent attention "
    "caches one compressed latent per token (kv_lora_rank {rank} wide) and a shared rotary key (qk_rope_head_dim "
    "{rope}), not per-head keys and values, so PEFT's prefix (pre_seq_len keys and values per head and layer) does "
    "not fit its cache. Use finetuning_type prompt (num_virtual_tokens) or lora.",
    "prompt_adapter_under": "adapter_name_or_path: {path} is a {kind} adapter, which cannot be merged into the "
    "weights to train finetuning_type {method} on top of it: {fix}.",
    "part_prompt_continue": "set finetuning_type: {method} to continue training it, or remove it",
    "part_remove_it": "remove it",
    "prompt_adapter_other_kind": "adapter_name_or_path: {path} is a {kind} adapter, not one of finetuning_type "
    "{method} ({peft_type}): set finetuning_type {target} to continue it, or remove it.",
    "part_to_its_kind": "to its kind",
    "prompt_tokens_differ": "{option} {value} differs from the {tokens} virtual tokens of adapter_name_or_path "
    "{path}, which this run trains further: remove {option} or set it to {tokens}.",
    # GGUF export (export/gguf_export.py), prediction metrics (infer/metrics.py)
    "gguf_prompt_adapter": "export_format: gguf needs weights to convert, but {path} is a prefix / prompt adapter "
    "(finetuning_type ptuning or prompt), which changes no weight and cannot be merged into the model: export it "
    "with export_format: safetensors (the adapter with a reference to its base).",
    "gguf_multimodal": "export_format: gguf converts text models; {model} is a vision-language or audio model "
    "({arch}), whose tower llama.cpp keeps in a separate mmproj file that tunekit does not write: export it with "
    "export_format: safetensors.",
    "gguf_packages": "export_format: gguf needs the gguf and llama-cpp-python packages ({error}): pip install "
    "'tunekit[gguf]'.",
    "gguf_arch_unsupported": "export_format: gguf: llama.cpp's converter (llama-cpp-python {version}) has no "
    "architecture {arch} ({model}), so it cannot write a GGUF of this model: export it with export_format: "
    "safetensors.",
    "gguf_convert_failed": "llama.cpp's convert_hf_to_gguf.py could not convert the merged model",
    "gguf_quantize_failed": "llama.cpp could not quantize {name} to {kind}",
    "gguf_runner_failed": "{failure}:\n{tail}",
    "metrics_packages": "prediction metrics need jieba, nltk and rouge-chinese ({name} is missing): pip install "
    "'tunekit[metrics]'.",
    # the trainer's settings, checkpoints, the machine, optimizers, trackers (train/)
    "train_settings_invalid": "Invalid training settings: {error}",
    "ckpt_no_prefix_encoder": "{path} has no {file}, which a prefix_projection run resumes its prefix MLP from (its "
    "adapter holds only the MLP's output): resume from a checkpoint tunekit wrote, or start a new run with "
    "adapter_name_or_path: {path} (it continues as a plain prefix, without the MLP).",
    "ckpt_disk_full": "no space left on device while saving {what}; {intact}. Free some space (or set "
    "save_total_limit), then continue with resume_from_checkpoint: auto.",
    "part_ckpt_intact": "{name} is intact",
    "part_no_earlier_ckpt": "no earlier checkpoint exists",
    "part_final_model_to": "the final model to {path}",
    "part_ckpt_to": "checkpoint-{step} to {path}",
    "ds_not_installed": "deepspeed: {source} needs the DeepSpeed package, which is not installed: pip install "
    "'tunekit[deepspeed]' (or pip install deepspeed), or remove the deepspeed option.",
    "ds_offload_no_compiler": "deepspeed: {source} offloads the optimizer to the CPU, which needs DeepSpeed's CPU "
    "Adam op; it is built on first use and that needs a C++ compiler (c++/g++) and ninja, not found here. Install "
    "them (e.g. apt-get install build-essential; pip install ninja), or use a config without offload (z2, z3).",
    "ds_cpu_no_compiler": "deepspeed on CPU builds its shared-memory communication op on first use, which needs a "
    "C++ compiler and ninja, not found here: install them (apt-get install build-essential; pip install ninja).",
    "fp8_backend_unknown": "fp8_backend {backend} is not supported: use fp8_backend: torchao (or auto) or te.",
    "fp8_no_te": "fp8_backend te needs NVIDIA Transformer Engine (pip install transformer-engine[pytorch], on a CUDA "
    "machine), which is not installed: install it, or use fp8_backend: torchao.",
    "fp8_no_torchao": "fp8 with fp8_backend torchao (or auto) needs torchao, which is not installed: {install} (the "
    "fp8 extra), or use fp8_backend: te, or remove fp8.",
    "machine_fp16_no_gpu": "fp16 mixed precision needs a GPU and {where}; on CPU use fp32 (the default) or bf16.",
    "machine_fp8_no_gpu": "fp8 training needs an NVIDIA GPU with FP8 support (Hopper or newer) and {where}; remove "
    "fp8 (on CPU train in fp32, the default).",
    "part_use_cpu_set": "use_cpu is set",
    "part_none_visible": "none is visible",
    "machine_gpu_too_old": "{what} needs a GPU of compute capability {minimum} or newer ({family}); {name} is "
    "{capability}: {fix}.",
    "part_fp8_training": "fp8 training",
    "part_ampere_or_newer": "Ampere or newer",
    "part_fix_fp8_bf16": "remove fp8 and use bf16: true",
    "part_fix_bf16_fp16": 'use fp16: true instead (with a DeepSpeed file, its bf16 block disabled or "auto")',
    "optim_package_missing": "this optimizer needs the {package} package: pip install -c constraints.txt "
    "'.[optimizers]' (or pip install {package}).",
    "optim_targets_missing": "the target modules {missing} are not linear layers (or modules holding them) of this "
    "model; linear layers: {available} (or all).",
    "optim_muon_no_weights": "use_muon found no trainable 2-D weight inside the decoder layers: train them "
    "(finetuning_type: full or freeze) or remove use_muon.",
    "optim_galore_optim": "use_galore works with optim adamw_torch (or adamw_8bit, adafactor), not {optim}: set "
    "optim: adamw_torch.",
    "optim_apollo_optim": "use_apollo works with optim adamw_torch, not {optim}: set optim: adamw_torch.",
    "optim_badam_ratio_clip": "badam_mode: ratio updates sparse gradients, which torch's gradient clipping cannot "
    "norm: set max_grad_norm: 0 (or use badam_mode: layer).",
    "tracker_not_installed": "report_to includes {name} but the {package} package is not installed: pip install "
    "{package}, or remove {name} from report_to{swanlab}.",
    "part_swanlab_off": " / set use_swanlab: false",
    "tracker_wandb_login": "wandb needs a login: set WANDB_API_KEY (or run `wandb login`), or WANDB_MODE=offline to "
    "log locally.",
    "tracker_swanlab_offline": "swanlab_mode: cloud needs network access to {host}, which is not reachable from this "
    "machine. Use swanlab_mode: local (logs to disk, view with `swanlab watch`) or remove use_swanlab.",
    "tracker_swanlab_key": "swanlab_mode: cloud needs an API key: set swanlab_api_key or SWANLAB_API_KEY (or run "
    "`swanlab login`), or use swanlab_mode: local.",
    # the engines (train/engines/fsdp.py, media_ranks.py, launcher.py)
    "fsdp_no_distributed": "fsdp: {strategy} needs torch.distributed: start it with `tunekit train` (it runs "
    "torchrun) or your own launcher (torchrun / accelerate launch).",
    "fsdp_wrap_classes_missing": "fsdp_transformer_layer_cls_to_wrap (or fsdp_config's "
    "transformer_layer_cls_to_wrap) names {missing}, which {name} has no module of (its decoder layer classes: "
    "{own}): name classes of the loaded model, or remove the option to shard its decoder layers.",
    "part_none": "none",
    "fsdp_no_wrap_class": "fsdp: {name} has no module of class {classes}: name its decoder layer class with "
    "fsdp_transformer_layer_cls_to_wrap (e.g. LlamaDecoderLayer).",
    "fsdp_no_layer_class": "fsdp: {name} names no decoder layer class (_no_split_modules): name it with "
    "fsdp_transformer_layer_cls_to_wrap (e.g. LlamaDecoderLayer).",
    "fsdp_mixed_dtypes": "fsdp: the trainable parameters of one layer have different dtypes ({dtypes}); FSDP2 needs "
    "one per layer. Load the model in float32 (dtype: float32); bf16: true still computes in bf16.",
    "fsdp_no_state": "checkpoint {path} has no {state}/ (it was not written by an fsdp run, or with save_only_model: "
    "true): FSDP2 resumes only from its own checkpoints. Resume it without fsdp, or start from scratch.",
    "fsdp_checkpoint_sharded": "checkpoint {path} was written by an fsdp run: resume it with the same fsdp setting "
    "(its optimizer state is sharded).",
    "part_media_ranks_where": "{engine} with a vision-language model on {ranks} ranks: {count} of {total} {split} "
    "samples",
    "part_split_training": "training",
    "part_split_evaluation": "evaluation",
    "media_ranks_sharded": "{where} have no image, video or audio. These engines gather the vision tower's weights "
    "only on the ranks whose micro-batch has media, so the ranks would wait on each other. Give every sample its "
    "media, train the text-only samples in a separate run, or use deepspeed: z2 with the vision tower and projector "
    "frozen (or DDP / one process), which keep whole weights on every rank.",
    "media_ranks_tower_trains": "{where} have no image, video or audio, and the vision tower or projector trains: a "
    "rank without media has no gradient for them and the ranks' gradient reductions would not match. Give every "
    "sample its media, set freeze_vision_tower and freeze_multi_modal_projector to true, or train without deepspeed "
    "(DDP).",
    # USE_RAY=1: Ray Train's launch (train/engines/ray_launch.py)
    "launch_ray_options_alone": "{names}: LLaMA-Factory's Ray Train options are read only with USE_RAY=1 in the "
    "environment. Set USE_RAY=1 to train on a Ray cluster (docs/workflows/multi-gpu.md), or remove them: without "
    "USE_RAY, tunekit train starts its own processes (torchrun).",
    "launch_ray_with_torchrun": "USE_RAY=1 with {name}: Ray Train starts and places the processes itself "
    "(ray_num_workers, resources_per_worker, placement_strategy); unset {name}.",
    "launch_ray_missing": "USE_RAY=1 needs Ray Train, which is not installed: pip install 'tunekit[ray]' "
    "(ray[train] 2.60.0), on every node of the Ray cluster.",
    "launch_ray_resources": "ray_num_workers={workers} with {per_worker} each needs {need} {resource} but the Ray "
    "cluster has {have}: lower ray_num_workers or resources_per_worker, or join a larger cluster (RAY_ADDRESS, or "
    "address in ray_init_kwargs).",
    # the command line (cli/), the API server's flags (serve/server.py)
    "cli_flag_needs_value": "{flag} needs a value.",
    "cli_flag_expects": "{flag} expects {kind}, got {value}.",
    "part_a_whole_number": "a whole number",
    "part_a_number": "a number",
    "cli_data_unknown": "Unknown data command {command}: use `tunekit data stats CONFIG.yaml`.",
    "cli_data_no_dataset": "No dataset configured: set dataset (names from dataset_info.json or file paths).",
    "cli_verify_one_folder": "tunekit verify takes one folder: tunekit verify EXPORT_DIR [--json] [--strict].",
    "serve_bad_port": "{where} must be a port number from 1 to 65535, got {value}.",
    "serve_bad_body_mb": "{where} must be a positive number of megabytes (e.g. 4), got {value}.",
    "new_tokens_untrained": "{count} new special token(s) get embedding rows that finetuning_type {method} never "
    "trains, so they would stay as initialised: train the input and output embeddings too (additional_target: "
    "embed_tokens,lm_head with lora or oft, freeze_extra_modules with freeze: your model's module names; "
    "LLaMA-Factory adds them by itself), or use finetuning_type full.",
}

# placeholder → how a tuple of values is joined in English (added to problem_texts.JOINS)
JOINS_RUN: dict[str, str | tuple[str, str]] = {"diffs": "; ", "checkpoints": "; "}
