"""The English templates of the data layer's errors about a data file and its records (``data/readers.py``,
``data/formats.py``, ``data/message_content.py``, ``data/media_columns.py``, ``data/dataset_info.py``,
``data/templates/``, ``data/mm_plugins/``, ``data/processors/``, ``data/tokenized_cache.py``, ``data/pipeline.py``,
``data/padding_free.py``): key → template, part of :data:`tunekit.config.problem_texts.ENGLISH`. The board says each
again in Chinese (``webui/problems_zh_data.py``); the CLI says the English, word for word what these errors said
before they were keyed.

``{where}`` is a record's position (``part_where_record``: :attr:`~tunekit.data.readers.RawRecord.where`); ``{what}``
names the record's part (a column name as it is, or a ``part_what_*`` piece). A record's error is
wrapped by ``data_bad_record`` / ``predict_bad_record`` (``problem_texts_predict.py``) as their ``{error}``.
"""

from __future__ import annotations

ENGLISH_DATA: dict[str, str] = {
    # reading a data file (data/readers.py)
    "data_load_from": "dataset '{name}' ({path}): loading from '{source}' is not supported; download the file and "
    "use file_name.",
    "data_symlink_loop": "Data file {path} is a symbolic link that loops back on itself; point it at a real file.",
    "data_symlink_broken": "Data file {path} is a symbolic link that points at {target}, which does not exist; point "
    "it at a real file.",
    "data_file_missing": "Data file {path} does not exist (check file_name in dataset_info.json and dataset_dir).",
    "data_file_not_regular": "Data file {path} is not a regular file (a named pipe, device or socket); tunekit reads "
    "data only from files and folders: save the data to a file.",
    "data_folder_empty": "Data folder {path} holds no .json/.jsonl/.csv/.parquet/.txt files.",
    "data_folder_mixed": "Data folder {path} mixes file types ({kinds}); keep one type per dataset.",
    "data_not_utf8": "Data file {path} is not UTF-8: byte {offset} (line {line}: {bytes}) cannot be decoded; {likely}."
    " Convert it to UTF-8, e.g. `iconv -f {source} -t UTF-8 '{path}' > '{converted}'`, and point file_name at the "
    "converted file.",
    "part_encoding_guess": "it looks like {encoding}",
    "part_encoding_unknown": "its encoding could not be guessed",
    "data_bad_extension": "Data file {path}: unsupported extension '{suffix}' (use .json, .jsonl, .csv, .parquet or "
    ".txt).",
    "data_json_too_deep": "Data file {path} nests its lists or objects too deeply to be records (more than {limit} "
    "levels); a record is a flat object of fields.",
    "data_json_invalid": "Data file {path} is not valid JSON (line {line}, column {column}): {error}. Fix the file,"
    " or save it as .jsonl with one object per line.",
    "data_json_not_list": "Data file {path} must hold a JSON list of records, found {type}.",
    "data_not_json_constant": "Data file {path}{line} holds {word}, which is not JSON (nor text): write the value as"
    " a quoted string, a number, or null.",
    "part_json_line": ", line {line}",
    "part_jsonl_line_invalid": "Data file {path}, line {line} is not valid JSON: {why}",
    "part_json_why": "{error} (column {column})",
    "part_json_nested": "nested too deeply",
    "data_jsonl_line_invalid": "{problem}. Fix the line, or set bad_records: skip to skip it (it is then listed in "
    "preprocessing_report.json).",
    "record_jsonl_line_skipped": "{problem}; skipped (bad_records: skip).",
    "data_tabular_unreadable": "Data file {path} could not be read as {kind}: {error}",
    "data_hub_other_source": "dataset '{name}' ({path}) lives on {source}, which tunekit reads through the Hugging "
    "Face datasets cache only: Download it while online (it is then cached), or save it locally and register it with "
    "file_name in dataset_info.json.",
    "data_hub_unloadable": "dataset '{name}' ({path}) is a Hugging Face Hub dataset and could not be loaded ({state})."
    " Download it while online (it is then cached), or save it locally and register it with file_name in "
    "dataset_info.json.",
    "part_hub_offline": "HF_HUB_OFFLINE is set and it is not in the cache",
    # a dataset as a whole (data/pipeline.py)
    "data_preference_for_single_reply": "Dataset '{name}' is preference data (\"ranking\": true in dataset_info.json: "
    "chosen and rejected replies), which stage {stage} does not train on; use it with stage: dpo or rm, or choose a "
    "dataset of {kind} for {stage}.",
    "part_kind_texts": "texts",
    "part_kind_conversations": "conversations",
    "data_all_dropped": "dataset '{name}' ({path}): every sample was dropped (no trainable tokens after cutoff_len "
    "{cutoff}); e.g. {examples}.",
    # a record (data/formats.py)
    "record_not_object": "{where}: expected a JSON object, found {type}.",
    "record_lone_surrogate": "{where}: after {before} the text holds U+{code:04X}, half of a UTF-16 surrogate pair (a "
    "lone '\\u{code:04x}' escape), no character: fix or remove it.",
    "record_too_large": "{where}: the record holds {size:,} characters of text, more than one sample can use (limit "
    "{limit:,}, about a million tokens); split it into several records.",
    "record_bad_tools": "{where}: {error}; the tools column holds a JSON list of function definitions.",
    "record_missing_column": "{where}: missing column '{column}' ({key}); the record has: {present}. Fix the record"
    " or map the column in dataset_info.json 'columns' of '{name}'.",
    "part_no_columns": "none",
    "record_history_pairs": "{where}: history must be a list of [question, answer] pairs.",
    "part_what_history_question": "history question",
    "part_what_history_answer": "history answer",
    "part_what_message": "message {index}",
    "part_what_message_content": "message {index} content",
    "record_preference_answers": "{where}: preference data needs both chosen and rejected answers (columns "
    "'{chosen}' and '{rejected}').",
    "record_sharegpt_as_alpaca": "{where}: the record holds '{key}', a list of messages (sharegpt-style data), but "
    "the dataset_info.json entry '{name}' reads it as alpaca (the default formatting), which needs '{prompt}'. Add "
    "{fix} to the entry '{name}'.",
    "part_fix_sharegpt": '"formatting": "sharegpt"{columns}',
    "part_fix_openai_with_tags": '"formatting": "openai"{openai_columns} (or "formatting": "sharegpt" with {tags})',
    "part_fix_openai_and_tags": '"formatting": "openai"{openai_columns} (or "formatting": "sharegpt"{columns} and '
    "{tags})",
    "part_with_columns": ' with "columns": {{"messages": "{key}"}}',
    "record_kto_tag": "{where}: kto_tag must be true or false, found {value}.",
    "record_messages_not_list": "{where}: '{column}' must be a non-empty list of messages.",
    "record_message_not_object": "{where}: message {index} must be an object with '{role_tag}' and "
    "'{content_tag}'.{hint}",
    "part_openai_style_hint": " This message has 'role'/'content' (OpenAI style): add \"formatting\": \"openai\" to "
    "the dataset_info.json entry '{name}', or the sharegpt tags {tags}.",
    "record_unknown_role": "{where}: message {index} has unknown role '{tag}'; expected one of {roles} (set 'tags' in "
    "dataset_info.json entry '{name}' to map other names).",
    "record_late_system": "{where}: message {index} is a system message; only the first message may be one.",
    "record_role_order": "{where}: message {index} has role '{tag}' where {want} is expected; conversations must "
    "alternate user → assistant.{hint}",
    "part_want_prompt": "a user/observation message",
    "part_want_reply": "an assistant/function_call reply",
    "part_tool_results_in_a_row": " Several tool results in a row: put them in one tool message (e.g. a JSON list of "
    "the results), as LLaMA-Factory's tool-use data does.",
    "record_loss_weight": "{where}: message {index} ({role}) has loss_weight {weight}; tunekit trains every reply "
    "with weight 1.0 and no other message (0.0), other per-message weights are not supported (yet). Remove the key, "
    "or use mask_history: true to train only the last reply.",
    "record_preference_messages": "{where}: preference data needs both '{chosen}' and '{rejected}' messages.",
    "record_v1_pair_end": "{where}: '{key}' must end with the assistant's reply, found a {role} message.",
    "record_v1_pair_differ": "{where}: chosen_messages and rejected_messages must share the conversation before the "
    "last reply; they differ at {at}.",
    "part_the_system_message": "the system message",
    "record_reply_role": "{where}: {what} must be an assistant or function_call message, found role '{tag}'.",
    "record_empty_text": "{where}: empty text.",
    "record_no_messages": "{where}: no messages.",
    "record_stage_needs_preference": "{where}: stage {stage} needs preference data (chosen/rejected); set "
    "\"ranking\": true in the dataset_info.json entry '{name}' and map its columns.",
    "record_pair_prompt_end": "{where}: the conversation before chosen/rejected must end with a user message.",
    "record_ends_with": "{where}: the conversation ends with a {role} message; {stage} needs it to end with the "
    "assistant's reply.",
    "record_empty_reply": "{where}: assistant turn {turn} is empty; remove the record or fill in the answer.",
    "record_kto_needs_label": "{where}: kto needs a desirable/undesirable label; map it with columns.kto_tag in "
    "'{name}'.",
    "record_empty_prompt": "{where}: the prompt is empty.",
    # a message's content (data/message_content.py)
    "record_parts_not_for_prompt": "{where}: {what} has a '{kind}' part; reasoning and tool_call parts belong to "
    "assistant messages only.",
    "record_content_not_text": "{where}: {what} must be text, found {type}.",
    "part_where_part": "{where}: {what}, part {index}",
    "part_where_tool_call": "{where}: {what}, tool_calls[{index}]",
    "record_part_no_type": "{where} must be an object with a 'type' ({types}), found {value}.",
    "record_part_media": "{where} is '{kind}': {media} are not supported yet (tunekit trains on text only). Remove"
    " the part, or the record, to train on the text.",
    "record_part_unknown_type": "{where} has unknown type '{kind}'; supported part types: {types} (and OpenAI's "
    "'text' parts with a 'text' key).",
    "record_part_not_string": "{where} ('{kind}') needs a string '{key}', found {type}.",
    "record_tool_call_json": "{where} ('tool_call') is not valid JSON ({error}): {value}.",
    "record_tool_call_shape": "{where} ('tool_call') must be an object with 'name' and 'arguments', found {value}.",
    "record_text_and_calls": "{where}: {what} has both text and tool calls; tunekit renders a tool-call reply as the "
    "calls alone (and its reasoning). Move the text into its own assistant message, or drop it.",
    "record_tool_calls_not_list": "{where}: {what} 'tool_calls' must be a list, found {type}.",
    "record_reasoning_not_text": "{where}: {what} 'reasoning_content' must be text, found {type}.",
    # media (data/media_columns.py)
    "record_media_not_paths": "{where}: '{column}' ({key}) must be a list of file paths, found {value}.",
    "record_media_part_no_path": "{where}: message {index}, part {part} ('{kind}') needs a file path (or "
    '{{"url": PATH}}), found {value}.',
    "record_placeholder_count": "{where}: {found} {tag} placeholder(s) in the text but {count} {key} in the record; "
    "put one {tag} where each of its {key} goes (LLaMA-Factory's rule), or fix the {key} list.",
    # dataset_info.json and its entries (data/dataset_info.py); {where} is an entry (part_info_entry) or a name
    "info_invalid_json": "{path} is not valid JSON (line {line}, column {column}): {error}.",
    "info_not_object": "{path} must be a JSON object mapping dataset names to their description.",
    "part_info_entry": "{file}, entry '{name}'",
    "part_where_record": "{file}, record {index}",
    "part_dataset_named": "Dataset '{name}'",
    "info_entry_not_object": '{where}: must be an object like {{"file_name": "data.json"}}.',
    "info_unknown_keys": "{where}: unknown key(s) {keys}; valid keys: {valid}.",
    "info_bad_formatting": "{where}: formatting '{formatting}' is not one of alpaca, sharegpt, openai.",
    "info_file_and_hub": "{where}: gives both file_name (a local file) and {source} (a remote dataset); keep the one "
    "to read (LLaMA-Factory would read {source}).",
    "info_split_of_file": "{where}: split '{split}' names a split of a hub dataset, but file_name is a local file, "
    "which is read whole (its one split is train): remove split, or give each split its own file and entry.",
    "info_no_source": "{where}: needs file_name (a local file) or hf_hub_url / ms_hub_url (a hub dataset).",
    "info_columns_not_objects": "{where}: 'columns' and 'tags' must be objects.",
    "info_unknown_columns": "{where}: unknown column key(s) {keys} for {formatting} data; valid: {valid}.",
    "info_unknown_tags": "{where}: unknown tag key(s) {keys}; valid: {valid}.",
    "info_not_text": '{where}: "{key}" must be text, found {value} ({type}).',
    "info_ranking_not_bool": '{where}: "ranking" must be true or false (JSON booleans, no quotes), found {value}.',
    "info_num_samples": '{where}: "num_samples" must be a whole number of at least 1, found {value}.',
    "info_group_value": "{where}: {group}.{key} must be {what}, found {value} ({type}).",
    "part_column_or_null": "a column name (text) or null",
    "part_text": "text",
    "info_not_registered": "Dataset '{name}' is not in {path} and is not a file. {hint}",
    "part_no_info_file": "no {file} in dataset_dir '{folder}': set dataset_dir to the folder that has it, or give a "
    "file path",
    "part_dataset_did_you_mean": "Did you mean: {names}?",
    "part_registered_names": "registered names: {names}{more}",
    "info_confined": "{where}: {key} {problem}.",
    "part_outside_roots": "'{value}' is outside the folders this job may read ({roots}) or hidden: use a file inside "
    "them",
    "part_not_hub_id": "is not a hub id (namespace/name)",
    "part_hub_id_local": "is not a hub id: it names the local path {path}",
    "part_hub_id_fix": "'{value}' {problem}: give a hub dataset id, or register a local file with file_name",
    "part_cloud_not_read": "is not read here: download the file into the workspace and register it with file_name",
    # the tools column and function calls (data/templates/tools.py)
    "tools_invalid_json": "invalid JSON in the tools column: {error}: {value}",
    "tools_not_list": "the tools column must be a JSON list of objects, got: {value}",
    "calls_not_json": "a function_call message must be JSON with name and arguments, got: {value}",
    "call_needs_name": "a function_call needs 'name' and 'arguments', got: {value}",
    "calls_glm4_parallel": "GLM-4 cannot express parallel function calls (one call per assistant turn)",
    # a record's media (data/mm_plugins/, data/processors/media.py)
    "media_not_path": "{where}: {kind}[{index}] must be a file path (string), found {value}.",
    "media_url": "{where}: {kind}[{index}] is a URL ({url}); tunekit reads local media files only: download it and "
    "give its path (relative to media_dir / dataset_dir).",
    "media_not_found": "{where}: {kind}[{index}] '{value}' not found (looked for {full}). Fix the path, or set "
    "media_dir to the folder the paths are relative to.",
    "media_outside_roots": "{where}: {kind}[{index}] '{value}' is outside the folders this job may read ({roots}) or "
    "hidden: keep media files inside them.",
    "media_needs_av": '{where}: reading {what} needs PyAV: pip install -e ".[vision]" (or pip install av).',
    "part_av_audio": "audio",
    "part_av_videos": "videos",
    "media_image_unreadable": "{where}: image {path} cannot be read ({type}: {error}); the file is corrupt or not an "
    "image. Replace it, or remove the record.",
    "media_audio_unreadable": "{where}: audio {path} cannot be read ({type}: {error}); the file is corrupt or not an "
    "audio file. Replace it, or remove the record.",
    "media_video_unreadable": "{where}: video {path} cannot be read ({type}: {error}); the file is corrupt or not a "
    "video. Replace it, or remove the record.",
    "media_audio_empty": "{where}: audio {path} has no samples.",
    "media_video_empty": "{where}: video {path} has no frames.",
    "media_text_only_template": "{where}: has {kinds}, but template '{template}' is text-only: train a "
    "vision-language model with its multimodal template (e.g. qwen2_vl for Qwen2-VL / Qwen2.5-VL), or remove the "
    "{first} column from the dataset to train on the text.",
    "media_stage_unsupported": "stage {stage} with a multimodal model is not supported by tunekit yet (supported: "
    "{supported}); see docs/multimodal.md.",
    "media_family_unsupported": "{where}: has {kinds}; the {family} family in tunekit trains on {media} only so far "
    "(see docs/multimodal.md). Remove the record, or the {first} column.",
    # a model's media processor (data/mm_plugins/: loading the family's plugin)
    "mm_no_preprocessor": "{path} has no {what} (preprocessor_config.json) for {family}: {error}",
    "part_mm_feature_extractor": "feature extractor",
    "part_mm_image_processor": "image processor",
    "mm_tokenizer_lacks": "the tokenizer of {path} lacks {family}'s {tokens}: is it a {family} model?",
    "mm_text_only_template": "template '{template}' is text-only, but {path} is a vision-language model (model_type "
    "'{model_type}'): use its multimodal template ({known}), so images are expanded into the model's image tokens.",
    "mm_template_other_model": "template '{template}' is for {types} models, but {path} has model_type "
    "'{model_type}': choose the template of this model (`tunekit templates`).",
    "mm_no_audio_in_video": "use_audio_in_video is true, but the {family} family reads no audio track from videos "
    "(its videos are frames only): set use_audio_in_video: false (tunekit has no audio-visual family such as "
    "Qwen2.5-Omni yet).",
    "mm_no_image_processor": "{path} has no image processor (processor_config.json or preprocessor_config.json), "
    "which the {family} family needs: copy the files of the base model's processor into the folder "
    "(AutoProcessor.from_pretrained(base).save_pretrained(folder)).",
    "mm_processor_unloadable": "{path}: the {family} processor cannot be loaded (processor_config.json / "
    "preprocessor_config.json + tokenizer): {error}",
    "mm_other_processor": "{path} has the processor {found}, but template '{template}' is for {processor} models: "
    "choose the template of this model (`tunekit templates`).",
    "mm_no_image_token": "the tokenizer of {path} has no token {token}: is it a {family} model?",
    "mm_smolvlm_files": "{path} lacks processor_config.json or preprocessor_config.json, which the SmolVLM family "
    "needs (image_seq_len, the image processor): copy them from the base model's folder.",
    "mm_pan_and_scan": "{path}: the image processor has do_pan_and_scan: true; tunekit trains Gemma 3 without "
    "pan-and-scan crops so far: set it to false in the folder's processor config.",
    "mm_audio_rate": "audio_sampling_rate is {rate} Hz but the feature extractor of {path} works at {own} Hz: remove "
    "audio_sampling_rate (the feature extractor's rate is the default) or set it to {own}.",
    "mm_llava_next_variant": "template '{template}' is the chat format of LLaVA-NeXT on {types} ({variant}), but "
    "{path} is LLaVA-NeXT on {text_type} whose chat template is not that one: {fix}.",
    "part_set_template": "set template: {template}",
    "part_no_template_fits": "no tunekit template has its chat format yet",
    "mm_pixel_limits": "image_min_pixels {low} is larger than image_max_pixels {high} (one of them the processor's in "
    "{path}): set both, or lower image_min_pixels / raise image_max_pixels.",
    # the processors (data/processors/)
    "data_no_processor": "stage '{stage}' has no data processor yet (available: {available}).",
    "data_pt_no_eos": "stage pt: the tokenizer has no EOS token to end documents with; set eos_token in its "
    "tokenizer_config.json or name the model's chat template (template: ...).",
    "record_template_refused": "{where}: {error}",
    "part_a_record": "a record",
    # a saved tokenized dataset (data/tokenized_cache.py); {fix} is part_cache_fix (part_cache_fix_first: a sentence)
    "cache_mismatch": "tokenized_path {path} was tokenized with {key} = {saved}, but this config gives {key} = "
    "{current}: its rows do not fit this run. {fix}.",
    "cache_old_format": "tokenized_path {path} was saved by an older tunekit that did not record what the data was "
    "tokenized with (stage, template, tokenizer, cutoff_len, ...), so it cannot be checked against this config: "
    "{fix}.",
    "cache_missing_key": "tokenized_path {path} does not record {key}, so it cannot be checked against this config: "
    "{fix}.",
    "cache_media_missing": "tokenized_path {path}: its rows use the media file {file}, which is missing. Put the file "
    "back (the rows hold absolute paths), or {fix}.",
    "cache_media_changed": "tokenized_path {path}: the media file {file} changed since it was tokenized (size {size} "
    "-> {now} bytes, or its modification time), so its token count may not fit: {fix}.",
    "cache_foreign": "tokenized_path {path} holds a saved dataset without {meta} (LLaMA-Factory's tokenized_path, or "
    "an interrupted save): tunekit cannot tell what it was tokenized with, and does not write over it. Point "
    "tokenized_path to a new folder, or set overwrite_cache: true to replace it.",
    "part_cache_fix": "set overwrite_cache: true to tokenize again (it replaces the saved data), or point "
    "tokenized_path to another folder",
    "part_cache_fix_first": "Set overwrite_cache: true to tokenize again (it replaces the saved data), or point "
    "tokenized_path to another folder",
    # the options of a run's data (data/pipeline.py, data/padding_free.py)
    "data_template_not_set": "template is not set: name the chat template of your model (e.g. qwen, llama3, default;"
    " `tunekit templates` lists them) or 'jinja' to use the tokenizer's own chat_template.",
    "data_thought_weight_template": "thought_loss_weight {weight:g} needs a reasoning template with thought markers "
    "({templates}), but template is {template}: it has no thought block to weight; use your reasoning model's "
    "template, or remove thought_loss_weight.",
    "data_preserve_thinking_template": "preserve_thinking needs a reasoning template with thought markers "
    "({templates}), but template is {template}: it drops no thought from earlier replies; use your reasoning model's "
    "template, or remove preserve_thinking.",
    "data_dataset_not_set": "dataset is not set: name one or more datasets from dataset_info.json (dataset: a,b) or "
    "give a file path.",
    "data_val_size_no_train": "val_size {val_size:g} leaves no training samples: the data has {count} usable "
    "sample(s) after preprocessing. Use a smaller val_size (e.g. 0.1) or more data.",
    "data_interleave_probs_count": "interleave_probs has {probs} values but dataset names {datasets} datasets.",
    "part_dataset_path": "dataset '{name}' ({path})",
    "data_family_not_packed": "{option} is not supported for the {family} family: {reason}. Remove {option} for this "
    "model (the padded batches are exact).",
    "part_gemma3_packed_mask": "transformers 5.24 builds Gemma 3's sliding-window mask with the image blocks as an "
    "or_mask_function, which it then indexes by the restarted per-sample positions "
    "(masking_utils.remap_positions_for_packed_sequence), so image tokens would attend to the wrong blocks",
    # the chat templates (data/templates/)
    "template_unknown": "unknown template '{name}'.{hint} Available: {available} (see `tunekit templates`).",
    "template_no_messages": "a conversation needs at least one message",
    "template_message_shape": "message {index} must be a dict with a 'role' and a string 'content', got {value}",
    "template_reasoning_not_text": "message {index}: 'reasoning' must be a string (the reply's thought) or absent, "
    "got {type}",
    "template_role_order": "message {index} has role '{role}' but must be one of {roles}: conversations alternate "
    "user/observation and assistant/function_call, starting with the user (put the system prompt in the 'system' "
    "argument, not in the messages)",
    "template_prompt_end": "render_prompt needs messages ending with a user/observation message",
    "template_training_end": "a training conversation must end with an assistant/function_call message",
    "template_unknown_tool_format": "unknown tool_format '{value}'; choose one of: {formats}",
    "template_no_tools": "template '{name}' cannot express tools (no tool-call format); use a chat template with tool "
    "support (qwen, qwen3, llama3, glm4, mistral, default, ...)",
    "template_no_calls": "template '{name}' cannot express function calls",
    "jinja_no_chat_template": "template 'jinja' renders with the tokenizer's own chat_template, but {what}. Pick a "
    "named template instead (e.g. template: qwen, llama3, default; see `tunekit templates`).",
    "part_jinja_no_tokenizer": "no tokenizer was given",
    "part_jinja_tokenizer_lacks": "this tokenizer has no chat_template",
    "jinja_render_failed": "the tokenizer's chat_template failed to render this conversation: {error}",
    "jinja_not_prefix_preserving": "template 'jinja': the tokenizer's chat_template is not prefix-preserving: adding "
    "turn {turn} changes how the earlier turns render (e.g. Qwen3 drops the <think> blocks of earlier replies), so "
    "the assistant spans cannot be found. Use the named template for this family (e.g. qwen3).",
    "jinja_reply_not_continued": "template 'jinja': turn {turn}'s reply does not continue the generation prompt the "
    "chat_template renders (add_generation_prompt=True); the assistant span cannot be found. Use a named template "
    "instead.",
    # gpt-oss's harmony format (data/templates/harmony.py, harmony_tools.py); {where} names a tool schema's place
    "harmony_tool_format": "template '{name}' writes tools and calls in harmony's own format; tool_format "
    "'{tool_format}' cannot change it (leave tool_format unset)",
    "harmony_orphan_result": "message {index} is a tool result (observation) that follows no function_call: harmony "
    "names the tool that answers (<|start|>functions.NAME to=assistant) after the call it answers: put the "
    "function_call message before it.",
    "harmony_parallel_calls": "message {index} holds {count} function calls ({names}); gpt-oss (harmony) makes one "
    "call per assistant message (its official chat template renders only the first): split them into one "
    "function_call / observation pair each",
    "harmony_schema_not_object": "{where}: a JSON schema must be an object, got {value}",
    "harmony_required_not_list": "{where}: 'required' must be a list of property names, got {value}",
    "harmony_unrendered": "{where}: gpt-oss's official chat template cannot render '{key}' (it declares the parameter "
    "as 'any'); {fix}",
    "part_harmony_fix_any_of": 'write it as \'oneOf\' or a type list ("type": ["string", "null"])',
    "part_harmony_fix_all_of": "merge the schemas into one object",
    "part_harmony_fix_ref": "write the referenced schema in place",
    "part_harmony_fix_const": "write it as a one-value 'enum' of type string",
    "part_harmony_fix_not": "describe the allowed values with 'type' / 'enum'",
    "harmony_default_not_text": "{where}: the default of an 'enum' / 'oneOf' parameter must be a string for gpt-oss's "
    "official chat template (it writes it as text), got {value}",
    "harmony_tool_no_name": "a tool needs a string 'name' (and 'description', 'parameters'), got {value}",
    "harmony_tool_no_description": "{where}: gpt-oss's official chat template needs a string 'description' (written "
    "as a // comment)",
    "part_harmony_tool": "tool '{name}'",
    "part_harmony_parameters": "{where}, parameters",
    "part_harmony_parameter": "{where}, parameter {name}",
    "part_harmony_items": "{where}[]",
    "part_harmony_one_of": "{where} (oneOf {index})",
    "part_harmony_property": "{where}.{name}",
}
