"""The English templates of the export checks' problems (``export/verify.py``: ``tunekit verify`` and the check a
``tunekit export`` ends with, ``verify_media.py`` for a vision/audio export, ``gguf_verify.py`` for a GGUF export;
``export/gptq_check.py``: a GPTQ export's check): key → template, part of
:data:`tunekit.config.problem_texts.ENGLISH`. The board says each again in Chinese (``webui/problems_zh_export.py``).

Each problem is a :class:`~tunekit.config.problems.Said` in the report's ``problems`` (a ``str``: the report's JSON
and the CLI's lines are the English), and the failed export's error (``export_verify_failed``,
``gptq_check_failed``) takes them as a tuple, so the board says every one of them in Chinese too. Tensor and file
names, shapes, dtypes, numbers and a library's own error text are values, shown as they are.
"""

from __future__ import annotations

ENGLISH_EXPORT: dict[str, str] = {
    # export/verify.py: the folder and its weight files
    "verify_no_config": "{path} has no config.json: it is not a model folder (give the export_dir of "
    "`tunekit export`).",
    "verify_no_weights": "no weight files in {path} (model.safetensors or {index})",
    "verify_missing_shards": "the index names missing shard file(s): {shards}",
    "verify_tensor_twice": "tensor {tensor} is stored twice ({first} and {second})",
    "verify_shard_too_big": "shard {shard} is {size:,} bytes, over export_size {limit} GB",
    "verify_index_mismatch": "the index does not match the shards (not indexed: {extra}, indexed but absent: "
    "{absent})",
    # loading it with plain transformers
    "verify_load_failed": "plain transformers cannot load {path}: {error}",
    "verify_load_keys": "transformers reported {reported}",
    "verify_shape_mismatch": "shape mismatch: {shapes}",
    "part_verify_shape": "{tensor}: saved {saved}, model {model}",
    "part_verify_renamed": "the {count} tensors saved under other names than the model's do not have the shapes of "
    "its remaining tensors",
    "verify_dtype_mismatch": "config.json declares dtype {declared} but the shards hold {held}",
    # its chat template and generation
    "verify_no_chat_template": "the tokenizer has no chat_template: apply_chat_template cannot render prompts",
    "verify_template_differs": "the saved chat_template renders differently from tunekit's '{template}' template: "
    "{saved} vs {ours}",
    "verify_no_tokens": "generate produced no tokens",
    # a merged adapter's logits against base + adapter
    "verify_not_merged": "the exported weights equal the base model: the adapter was not merged",
    "part_verify_merged_logits": "max |merged - (base + adapter)| = {diff:.3e} over {positions} positions ({dtype} "
    "export; the adapter moves logits by up to {effect:.3e})",
    "verify_merged_logits_above": "{detail}, above {bound:g}",
    # a prefix / prompt adapter export
    "verify_adapter_no_base": "adapter_config.json names no base_model_name_or_path: the adapter cannot be loaded",
    "verify_adapter_base_missing": "the base model {base} named by the adapter is not a local folder here nor cached",
    "part_verify_adapter_logits": "max |exported - trained adapter| = {diff:.3e} (the adapter moves logits by up to "
    "{effect:.3e})",
    "verify_adapter_no_effect": "{detail}: the adapter has no effect",
    "verify_adapter_logits_above": "{detail}, above {bound:g}",
    # export/verify_media.py: a vision-language or audio-language export
    "verify_media_no_prompt": "tunekit cannot render an image/audio prompt for {path} ({error})",
    "verify_media_no_processor_files": "{path} has no {absent_files}: AutoProcessor cannot load the vision/audio "
    "processor of this model. Copy the base model's processor files into it (AutoProcessor.from_pretrained(base)"
    ".save_pretrained(folder)), or export again with tunekit export.",
    "part_verify_either": "{one} or {other}",
    "verify_media_processor_failed": "AutoProcessor cannot load {path}: {error}",
    "verify_media_prompt_differs": "on {conversation} the processor's official rendering and tunekit's '{template}' "
    "differ from token {token}: {official} vs {ours}",
    "part_verify_media_conversation": "the image/audio conversation",
    "part_verify_text_conversation": "a text conversation",
    "verify_media_tensors_differ": "the processor's {tensor_names} differ from tunekit's for the same {media}",
    "part_verify_image": "image",
    "part_verify_audio": "audio",
    "part_verify_media": "media",
    "part_verify_media_logits": "max |merged - (base + adapter)| = {diff:.3e} over {positions} positions with the "
    "{media} ({dtype} export; the adapter moves logits by up to {effect:.3e})",
    "verify_media_greedy_differs": "greedy ids differ from base + adapter's from token {token} ({merged} vs "
    "{adapter}), though the two best logits there are {margin:.2e} apart, more than twice the logit difference "
    "{diff:.2e}",
    # export/gguf_verify.py: a GGUF export, in llama.cpp
    "verify_gguf_missing": "the GGUF file {file} named in tunekit_export.json is not in {path}",
    "verify_gguf_unreadable": "the gguf package cannot read {file}: {error}",
    "verify_gguf_load_failed": "llama.cpp cannot load {file}: {error}",
    "verify_gguf_tokens_differ": "llama.cpp tokenizes the chat-templated {text_kind} differently from training: first "
    "difference at token {token} (llama.cpp {ours}, training {trained}; {ours_count} vs {trained_count} tokens) in "
    "{text}",
    "part_verify_gguf_conversation": "conversation",
    "part_verify_gguf_prompt": "prompt",
    "part_verify_gguf_logits": "{kind}: max |llama.cpp - transformers| over the next-token logits = {diff:.3e}, "
    "bound {bound:.3e} (first-order, {stages} rounded stages; gguf_verify.py){adapter_effect}",
    "part_verify_gguf_effect": "; the adapters move these logits by up to {effect:.3e}",
    "verify_gguf_logits_above": "{detail}: above the bound",
    "part_verify_gguf_greedy": "{kind}: transformers' greedy continuation of {steps} tokens: max |llama.cpp - "
    "transformers| {diff:.3e} (bound at that step {bound:.3e}); llama.cpp's top-1 equals transformers' at "
    "{same}/{steps} steps, {judged} of them judged (top-1 margin above twice the bound), the rest counted",
    "verify_gguf_greedy_above": "{detail}: logits above the bound at step(s) {at_steps}",
    "verify_gguf_greedy_top1": "{detail}: a different top-1 at judged step(s) {at_steps}",
    "verify_gguf_no_template": "the GGUF has no tokenizer.chat_template: llama.cpp runtimes cannot render chat "
    "prompts",
    "verify_gguf_template_differs": "the GGUF's chat template (tokenizer.chat_template, what llama.cpp runtimes "
    "render with) renders {rendered}, tunekit's '{template}' template {ours}",
    # export/gptq_check.py
    "gptq_check_no_layers": "no quantized layer (weight_packed) in the export",
    "gptq_check_reload_differs": "the reloaded model's logits differ from those of its stored weights by up to "
    "{mismatch:.3g} (the folder does not reload to the weights it holds)",
    "gptq_check_above_rtn": "the logits' relative RMS error on the calibration texts, {error:.4f}, exceeds "
    "round-to-nearest's {rtn:.4f} on the same grid",
}

JOINS_EXPORT: dict[str, str | tuple[str, str]] = {
    "problems": "; ",  # export_verify_failed, gptq_check_failed (problem_texts_run.py): the check's problems
    "shards": ", ",
    "reported": ", ",
    "shapes": "; ",
    "absent_files": ", ",
    "tensor_names": ", ",
}
