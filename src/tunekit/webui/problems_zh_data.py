"""A data file's and a record's errors in Chinese (what a failed job's data says on the board): one template per key of
:data:`tunekit.config.problem_texts_data.ENGLISH_DATA`, the same placeholders (``tests/webui/test_problems_zh.py``
holds every key to one); paths, record positions, column names, values and code stay as they are."""

from __future__ import annotations

ZH_DATA: dict[str, str] = {
    # reading a data file
    "data_load_from": "数据集 '{name}'（{path}）：不支持从 '{source}' 加载；请下载文件并用 file_name 指定。",
    "data_symlink_loop": "数据文件 {path} 是指向自身的循环符号链接；请让它指向真实的文件。",
    "data_symlink_broken": "数据文件 {path} 是符号链接，它指向的 {target} 不存在；请让它指向真实的文件。",
    "data_file_missing": "数据文件 {path} 不存在（请检查 dataset_info.json 中的 file_name 和 dataset_dir）。",
    "data_file_not_regular": "数据文件 {path} 不是普通文件（而是命名管道、设备或套接字）；tunekit 只从文件和目录读取"
    "数据：请把数据保存为文件。",
    "data_folder_empty": "数据目录 {path} 中没有 .json/.jsonl/.csv/.parquet/.txt 文件。",
    "data_folder_mixed": "数据目录 {path} 混有多种文件类型（{kinds}）；每个数据集只用一种类型。",
    "data_not_utf8": "数据文件 {path} 不是 UTF-8 编码：字节偏移 {offset} 处（第 {line} 行：{bytes}）无法解码；"
    "{likely}。请把它转换为 UTF-8，例如 `iconv -f {source} -t UTF-8 '{path}' > '{converted}'`，再把 file_name 指向转"
    "换后的文件。",
    "part_encoding_guess": "它看起来是 {encoding} 编码",
    "part_encoding_unknown": "无法推断它的编码",
    "data_bad_extension": "数据文件 {path}：不支持的扩展名 '{suffix}'（请使用 `.json`、`.jsonl`、`.csv`、`.parquet` "
    "或 `.txt`）。",
    "data_json_too_deep": "数据文件 {path} 的列表或对象嵌套过深（超过 {limit} 层），不能作为记录；一条记录应是由字段"
    "组成的扁平对象。",
    "data_json_invalid": "数据文件 {path} 不是有效的 JSON（第 {line} 行，第 {column} 列）：{error}。请修正文件，或把"
    "它另存为每行一个对象的 `.jsonl`。",
    "data_json_not_list": "数据文件 {path} 必须是由记录组成的 JSON 列表，实际为 {type}。",
    "data_not_json_constant": "数据文件 {path}{line} 含有 {word}，它不是 JSON（也不是文本）：请把该值写成带引号的字符"
    "串、数字或 null。",
    "part_json_line": " 第 {line} 行",
    "part_jsonl_line_invalid": "数据文件 {path} 第 {line} 行不是有效的 JSON：{why}",
    "part_json_why": "{error}（第 {column} 列）",
    "part_json_nested": "嵌套过深",
    "data_jsonl_line_invalid": "{problem}。请修正该行，或设置 bad_records: skip 跳过它（跳过的行会列在 preprocessing_"
    "report.json 中）。",
    "record_jsonl_line_skipped": "{problem}；已跳过（bad_records: skip）。",
    "data_tabular_unreadable": "数据文件 {path} 无法按 {kind} 格式读取：{error}",
    "data_hub_other_source": "数据集 '{name}'（{path}）位于 {source}，而 tunekit 只通过 Hugging Face 的 `datasets` 缓"
    "存读取：请在联网时下载它（之后会被缓存），或保存到本地并在 dataset_info.json 中用 file_name 注册。",
    "data_hub_unloadable": "数据集 '{name}'（{path}）是 Hugging Face 上的数据集，无法加载（{state}）。请在联网时下载"
    "它（之后会被缓存），或保存到本地并在 dataset_info.json 中用 file_name 注册。",
    "part_hub_offline": "已设置 HF_HUB_OFFLINE，而缓存中没有它",
    # a dataset as a whole
    "data_preference_for_single_reply": "数据集 '{name}' 是偏好数据（dataset_info.json 中 `\"ranking\": true`：`chose"
    "n` 和 `rejected` 回复），而 {stage} 阶段不训练偏好数据；请在 stage: dpo 或 rm 中使用它，或为 {stage} 选择{kind}"
    "数据集。",
    "part_kind_texts": "纯文本",
    "part_kind_conversations": "对话",
    "data_all_dropped": "数据集 '{name}'（{path}）：所有样本都被丢弃了（按 cutoff_len {cutoff} 截断后没有可训练的 tok"
    "en）；例如 {examples}。",
    # a record
    "record_not_object": "{where}：应为 JSON 对象，实际为 {type}。",
    "record_lone_surrogate": "{where}：在 {before} 之后，文本含有 U+{code:04X}，这是 UTF-16 代理对的一半（单独的 '\\u"
    "{code:04x}' 转义），不是字符：请修正或删除它。",
    "record_too_large": "{where}：该记录含 {size:,} 个字符的文本，超过一个样本可用的上限（{limit:,}，约一百万个 token"
    "）；请把它拆成多条记录。",
    "record_bad_tools": "{where}：{error}；`tools` 列应是由函数定义组成的 JSON 列表。",
    "record_missing_column": "{where}：缺少列 '{column}'（{key}）；该记录含有：{present}。请修正记录，或在 dataset_in"
    "fo.json 中 '{name}' 的 `columns` 里映射该列。",
    "part_no_columns": "（无）",
    "record_history_pairs": "{where}：`history` 必须是由 [问题, 回答] 对组成的列表。",
    "part_what_history_question": "`history` 中的问题",
    "part_what_history_answer": "`history` 中的回答",
    "part_what_message": "消息 {index}",
    "part_what_message_content": "消息 {index} 的内容",
    "record_preference_answers": "{where}：偏好数据需要 `chosen` 和 `rejected` 两个回答（列 '{chosen}' 和 '{rejected}"
    "'）。",
    "record_sharegpt_as_alpaca": "{where}：该记录含有 '{key}'，是消息列表（`sharegpt` 风格的数据），但 dataset_info.j"
    "son 中的条目 '{name}' 按 `alpaca`（默认格式）读取它，而 `alpaca` 需要 '{prompt}'。请在条目 '{name}' 中加入 {fix}"
    "。",
    "part_fix_sharegpt": '`"formatting": "sharegpt"`{columns}',
    "part_fix_openai_with_tags": '`"formatting": "openai"`{openai_columns}（或 `"formatting": "sharegpt"` 并'
    "加上 {tags}）",
    "part_fix_openai_and_tags": '`"formatting": "openai"`{openai_columns}（或 `"formatting": "sharegpt"`'
    "{columns}，并加上 {tags}）",
    "part_with_columns": ' 并设置 `"columns": {{"messages": "{key}"}}`',
    "record_kto_tag": "{where}：kto_tag 必须是 true 或 false，实际为 {value}。",
    "record_messages_not_list": "{where}：'{column}' 必须是非空的消息列表。",
    "record_message_not_object": "{where}：消息 {index} 必须是含有 '{role_tag}' 和 '{content_tag}' 的对象。{hint}",
    "part_openai_style_hint": "这条消息含有 `role`/`content`（OpenAI 风格）：请在 dataset_info.json 的条目 '{name}' "
    '中加入 `"formatting": "openai"`，或使用 `sharegpt` 标签 {tags}。',
    "record_unknown_role": "{where}：消息 {index} 的角色 '{tag}' 未知；应为 {roles} 之一（可在 dataset_info.json 的条"
    "目 '{name}' 中设置 `tags` 来映射其他名称）。",
    "record_late_system": "{where}：消息 {index} 是系统消息；只有第一条消息可以是系统消息。",
    "record_role_order": "{where}：消息 {index} 的角色为 '{tag}'，但此处应为 {want}；对话必须按用户 → 助手交替。"
    "{hint}",
    "part_want_prompt": "user/observation 消息",
    "part_want_reply": "assistant/function_call 回复",
    "part_tool_results_in_a_row": "连续出现了多个工具结果：请把它们放进一条工具消息（例如结果组成的 JSON 列表），LLaM"
    "A-Factory 的工具调用数据就是这样做的。",
    "record_loss_weight": "{where}：消息 {index}（{role}）的 loss_weight 为 {weight}；tunekit 以权重 1.0 训练每条回复"
    "、不训练其他消息（0.0），（暂）不支持其他逐消息权重。请删除该键，或使用 mask_history: true 只训练最后一条回复。",
    "record_preference_messages": "{where}：偏好数据需要 '{chosen}' 和 '{rejected}' 两条消息。",
    "record_v1_pair_end": "{where}：'{key}' 必须以助手的回复结尾，实际以 {role} 消息结尾。",
    "record_v1_pair_differ": "{where}：chosen_messages 和 rejected_messages 在最后一条回复之前的对话必须相同；两者在 "
    "{at} 处不同。",
    "part_the_system_message": "系统消息",
    "record_reply_role": "{where}：{what} 必须是 `assistant` 或 `function_call` 消息，实际角色为 '{tag}'。",
    "record_empty_text": "{where}：文本为空。",
    "record_no_messages": "{where}：没有消息。",
    "record_stage_needs_preference": "{where}：{stage} 阶段需要偏好数据（`chosen`/`rejected`）；请在 dataset_info.jso"
    "n 的条目 '{name}' 中设置 `\"ranking\": true` 并映射其列。",
    "record_pair_prompt_end": "{where}：`chosen`/`rejected` 之前的对话必须以用户消息结尾。",
    "record_ends_with": "{where}：对话以 {role} 消息结尾；{stage} 要求以助手的回复结尾。",
    "record_empty_reply": "{where}：第 {turn} 轮助手回复为空；请删除该记录或补上回答。",
    "record_kto_needs_label": "{where}：kto 需要“期望/不期望”标签；请在 '{name}' 中用 columns.kto_tag 映射它。",
    "record_empty_prompt": "{where}：提示为空。",
    # a message's content
    "record_parts_not_for_prompt": "{where}：{what} 含有 '{kind}' 部分；`reasoning` 和 `tool_call` 部分只能出现在助手"
    "消息中。",
    "record_content_not_text": "{where}：{what} 必须是文本，实际为 {type}。",
    "part_where_part": "{where}：{what}中的第 {index} 部分",
    "part_where_tool_call": "{where}：{what} 的 tool_calls[{index}]",
    "record_part_no_type": "{where} 必须是含有 `type`（{types}）的对象，实际为 {value}。",
    "record_part_media": "{where} 为 '{kind}'：暂不支持 {media}（tunekit 只训练文本）。请删除该部分或该记录，只用文本"
    "训练。",
    "record_part_unknown_type": "{where}的类型 '{kind}' 未知；支持的部分类型：{types}（以及 OpenAI 带 `text` 键的 `te"
    "xt` 部分）。",
    "record_part_not_string": "{where}（'{kind}'）需要字符串 '{key}'，实际为 {type}。",
    "record_tool_call_json": "{where}（'tool_call'）不是有效的 JSON（{error}）：{value}。",
    "record_tool_call_shape": "{where}（'tool_call'）必须是含有 `name` 和 `arguments` 的对象，实际为 {value}。",
    "record_text_and_calls": "{where}：{what} 同时含有文本和工具调用；tunekit 把工具调用回复渲染为只含调用（及其推理"
    "）。请把文本移到单独的助手消息中，或删除它。",
    "record_tool_calls_not_list": "{where}：{what} 的 'tool_calls' 必须是列表，实际为 {type}。",
    "record_reasoning_not_text": "{where}：{what} 的 'reasoning_content' 必须是文本，实际为 {type}。",
    # media
    "record_media_not_paths": "{where}：'{column}'（{key}）必须是文件路径列表，实际为 {value}。",
    "record_media_part_no_path": "{where}：消息 {index} 的第 {part} 部分（'{kind}'）需要文件路径（或 `{{\"url\": PATH"
    "}}`），实际为 {value}。",
    "record_placeholder_count": "{where}：文本中有 {found} 个 {tag} 占位符，但记录中有 {count} 个 {key}；请在每个 "
    "{key} 对应的位置放一个 {tag}（LLaMA-Factory 的规则），或修正 {key} 列表。",
    # dataset_info.json and its entries
    "info_invalid_json": "{path} 不是有效的 JSON（第 {line} 行，第 {column} 列）：{error}。",
    "info_not_object": "{path} 必须是把数据集名称映射到其描述的 JSON 对象。",
    "part_info_entry": "{file} 中的条目 '{name}'",
    "part_where_record": "{file} 中的记录 {index}",
    "part_dataset_named": "数据集 '{name}'",
    "info_entry_not_object": '{where}：必须是形如 `{{"file_name": "data.json"}}` 的对象。',
    "info_unknown_keys": "{where}：未知的键 {keys}；有效的键：{valid}。",
    "info_bad_formatting": "{where}：`formatting` '{formatting}' 不是 `alpaca`、`sharegpt`、`openai` 之一。",
    "info_file_and_hub": "{where}：同时给出了 file_name（本地文件）和 {source}（远程数据集）；请只保留要读取的那个（"
    "LLaMA-Factory 会读取 {source}）。",
    "info_split_of_file": "{where}：`split` '{split}' 指的是远程数据集的某个划分，但 file_name 是本地文件，会被整体读"
    "取（它唯一的划分是 `train`）：请删除 `split`，或为每个划分提供单独的文件和条目。",
    "info_no_source": "{where}：需要 file_name（本地文件）或 hf_hub_url / ms_hub_url（远程数据集）。",
    "info_columns_not_objects": "{where}：`columns` 和 `tags` 必须是对象。",
    "info_unknown_columns": "{where}：对 {formatting} 数据而言，列键 {keys} 未知；有效的列键：{valid}。",
    "info_unknown_tags": "{where}：未知的标签键 {keys}；有效的标签键：{valid}。",
    "info_not_text": '{where}：`"{key}"` 必须是文本，实际为 {value}（{type}）。',
    "info_ranking_not_bool": '{where}：`"ranking"` 必须是 true 或 false（JSON 布尔值，不加引号），实际为 {value}。',
    "info_num_samples": '{where}：`"num_samples"` 必须是不小于 1 的整数，实际为 {value}。',
    "info_group_value": "{where}：{group}.{key} 必须是{what}，实际为 {value}（{type}）。",
    "part_column_or_null": "列名（文本）或 null",
    "part_text": "文本",
    "info_not_registered": "数据集 '{name}' 不在 {path} 中，也不是文件。{hint}",
    "part_no_info_file": "dataset_dir '{folder}' 中没有 {file}：请把 dataset_dir 设为包含它的目录，或给出文件路径",
    "part_dataset_did_you_mean": "你是不是想用：{names}？",
    "part_registered_names": "已登记的名称：{names}{more}",
    "info_confined": "{where}：{key} {problem}。",
    "part_outside_roots": "'{value}' 不在此任务可读取的目录内（{roots}）或是隐藏文件：请使用这些目录内的文件",
    "part_not_hub_id": "不是数据集 ID（namespace/name）",
    "part_hub_id_local": "不是数据集 ID：它指向本地路径 {path}",
    "part_hub_id_fix": "'{value}' {problem}：请给出远程数据集的 ID，或用 file_name 登记本地文件",
    "part_cloud_not_read": "在此不会被读取：请把文件下载到工作目录内，并用 file_name 登记",
    # the tools column and function calls
    "tools_invalid_json": "`tools` 列中的 JSON 无效：{error}：{value}",
    "tools_not_list": "`tools` 列必须是由对象组成的 JSON 列表，实际为：{value}",
    "calls_not_json": "`function_call` 消息必须是含有 `name` 和 `arguments` 的 JSON，实际为：{value}",
    "call_needs_name": "`function_call` 需要 `name` 和 `arguments`，实际为：{value}",
    "calls_glm4_parallel": "GLM-4 无法表达并行的函数调用（每轮助手回复只能有一个调用）",
    # a record's media
    "media_not_path": "{where}：{kind}[{index}] 必须是文件路径（字符串），实际为 {value}。",
    "media_url": "{where}：{kind}[{index}] 是 URL（{url}）；tunekit 只读取本地媒体文件：请下载它并给出其路径（相对于 "
    "media_dir / dataset_dir）。",
    "media_not_found": "{where}：找不到 {kind}[{index}] '{value}'（查找位置为 {full}）。请修正路径，或把 "
    "media_dir 设为这些路径所相对的目录。",
    "media_outside_roots": "{where}：{kind}[{index}] '{value}' 不在此任务可读取的目录内（{roots}）或是隐藏文件：请把媒"
    "体文件放在这些目录内。",
    "media_needs_av": '{where}：读取{what}需要 PyAV：`pip install -e ".[vision]"`（或 `pip install av`）。',
    "part_av_audio": "音频",
    "part_av_videos": "视频",
    "media_image_unreadable": "{where}：无法读取图像 {path}（{type}: {error}）；文件已损坏或不是图像。请替换它，或删"
    "除该记录。",
    "media_audio_unreadable": "{where}：无法读取音频 {path}（{type}: {error}）；文件已损坏或不是音频文件。请替换它，"
    "或删除该记录。",
    "media_video_unreadable": "{where}：无法读取视频 {path}（{type}: {error}）；文件已损坏或不是视频。请替换它，或删"
    "除该记录。",
    "media_audio_empty": "{where}：音频 {path} 没有采样数据。",
    "media_video_empty": "{where}：视频 {path} 没有帧。",
    "media_text_only_template": "{where}：含有 {kinds}，但模板 '{template}' 只支持文本：请用视觉语言模型的多模态模板"
    "训练它（例如 Qwen2-VL / Qwen2.5-VL 用 qwen2_vl），或从数据集中删除 {first} 列，只用文本训练。",
    "media_stage_unsupported": "tunekit 暂不支持多模态模型的 {stage} 阶段（支持：{supported}）；见 "
    "docs/multimodal.md。",
    "media_family_unsupported": "{where}：含有 {kinds}；tunekit 中的 {family} 系列目前只训练 {media}（见 "
    "docs/multimodal.md）。请删除该记录，或删除 {first} 列。",
    # a model's media processor
    "mm_no_preprocessor": "{path} 中没有 {family} 所需的{what}（preprocessor_config.json）：{error}",
    "part_mm_feature_extractor": "特征提取器",
    "part_mm_image_processor": "图像处理器",
    "mm_tokenizer_lacks": "{path} 的分词器缺少 {family} 的 {tokens}：它是 {family} 模型吗？",
    "mm_text_only_template": "模板 '{template}' 只支持文本，但 {path} 是视觉语言模型（model_type '{model_type}'）：请"
    "使用它的多模态模板（{known}），这样图像才会展开为模型的图像 token。",
    "mm_template_other_model": "模板 '{template}' 适用于 {types} 模型，但 {path} 的 model_type 为 '{model_type}'：请"
    "选择该模型的模板（`tunekit templates`）。",
    "mm_no_audio_in_video": "use_audio_in_video 为 true，但 {family} 系列不读取视频中的音轨（其视频只有画面帧）：请"
    "设置 use_audio_in_video: false（tunekit 暂无 Qwen2.5-Omni 这类音视频系列）。",
    "mm_no_image_processor": "{path} 中没有 {family} 系列所需的图像处理器（processor_config.json 或 preprocessor_con"
    "fig.json）：请把基础模型处理器的文件复制到该目录（`AutoProcessor.from_pretrained(base).save_pretrained(folder)"
    "`）。",
    "mm_processor_unloadable": "{path}：无法加载 {family} 的处理器（processor_config.json / preprocessor_config.json "
    "+ 分词器）：{error}",
    "mm_other_processor": "{path} 的处理器为 {found}，但模板 '{template}' 适用于 {processor} 模型：请选择该模型的模板"
    "（`tunekit templates`）。",
    "mm_no_image_token": "{path} 的分词器没有 token {token}：它是 {family} 模型吗？",
    "mm_smolvlm_files": "{path} 缺少 processor_config.json 或 preprocessor_config.json，而 SmolVLM 系列需要它们（"
    "image_seq_len 和图像处理器）：请从基础模型的目录中复制它们。",
    "mm_pan_and_scan": "{path}：图像处理器设置了 do_pan_and_scan: true；tunekit 目前训练 `Gemma 3` 时不使用 "
    "`pan-and-scan` 裁剪：请在该目录的处理器配置中把它设为 false。",
    "mm_audio_rate": "audio_sampling_rate 为 {rate} Hz，但 {path} 的特征提取器工作在 {own} Hz：请删除 audio_sampling"
    "_rate（默认使用特征提取器的采样率），或把它设为 {own}。",
    "mm_llava_next_variant": "模板 '{template}' 是基于 {types}（{variant}）的 LLaVA-NeXT 的对话格式，但 {path} 是基"
    "于 {text_type} 的 LLaVA-NeXT，其对话模板不是这一种：{fix}。",
    "part_set_template": "请设置 template: {template}",
    "part_no_template_fits": "目前还没有 tunekit 模板支持它的对话格式",
    "mm_pixel_limits": "image_min_pixels {low} 大于 image_max_pixels {high}（其中一个来自 {path} 中的处理器）：请同"
    "时设置两者，或调低 image_min_pixels / 调高 image_max_pixels。",
    # the processors
    "data_no_processor": "{stage} 阶段还没有数据处理器（可用：{available}）。",
    "data_pt_no_eos": "pt 阶段：分词器没有用于结束文档的 EOS token；请在其 tokenizer_config.json 中设置 eos_token，"
    "或指定模型的对话模板（template: ...）。",
    "record_template_refused": "{where}：{error}",
    "part_a_record": "某条记录",
    # a saved tokenized dataset
    "cache_mismatch": "tokenized_path {path} 分词时使用的是 {key} = {saved}，而此配置给出的是 {key} = {current}：其中"
    "的数据行不适用于本次运行。{fix}。",
    "cache_old_format": "tokenized_path {path} 由旧版 tunekit 保存，未记录数据分词时的设置（stage、template、分词器、"
    "cutoff_len 等），因此无法与此配置核对：{fix}。",
    "cache_missing_key": "tokenized_path {path} 未记录 {key}，因此无法与此配置核对：{fix}。",
    "cache_media_missing": "tokenized_path {path}：其数据行使用的媒体文件 {file} 不存在。请把文件放回原处（数据行中"
    "保存的是绝对路径），或{fix}。",
    "cache_media_changed": "tokenized_path {path}：媒体文件 {file} 在分词后发生了变化（大小 {size} -> {now} 字节，或修"
    "改时间），其 token 数可能已不匹配：{fix}。",
    "cache_foreign": "tokenized_path {path} 中有一个保存的数据集，但没有 {meta}（LLaMA-Factory 的 tokenized_path，或"
    "中断的保存）：tunekit 无法得知它是用什么设置分词的，也不会覆盖它。请把 tokenized_path 指向新目录，或设置 "
    "overwrite_cache: true 来替换它。",
    "part_cache_fix": "设置 overwrite_cache: true 重新分词（会替换已保存的数据），或把 tokenized_path 指向其他目录",
    "part_cache_fix_first": "请设置 overwrite_cache: true 重新分词（会替换已保存的数据），或把 tokenized_path 指向其他"
    "目录",
    # the options of a run's data
    "data_template_not_set": "未设置 template：请指定模型的对话模板（例如 `qwen`、`llama3`、`default`；`tunekit "
    "templates` 会列出全部），或用 `jinja` 使用分词器自带的 chat_template。",
    "data_thought_weight_template": "thought_loss_weight {weight:g} 需要带思考标记的推理模板（{templates}），但 "
    "template 为 {template}：它没有可加权的思考块；请使用推理模型的模板，或删除 thought_loss_weight。",
    "data_preserve_thinking_template": "preserve_thinking 需要带思考标记的推理模板（{templates}），但 template 为 "
    "{template}：它不会从之前的回复中删除思考内容；请使用推理模型的模板，或删除 preserve_thinking。",
    "data_dataset_not_set": "未设置 dataset：请指定 dataset_info.json 中的一个或多个数据集（dataset: a,b），或给出文"
    "件路径。",
    "data_val_size_no_train": "val_size {val_size:g} 没有留下训练样本：预处理后数据只有 {count} 个可用样本。请调小 "
    "val_size（例如 0.1）或增加数据。",
    "data_interleave_probs_count": "interleave_probs 有 {probs} 个值，但 dataset 指定了 {datasets} 个数据集。",
    "part_dataset_path": "数据集 '{name}'（{path}）",
    "data_family_not_packed": "{family} 系列不支持 {option}：{reason}。请为该模型删除 {option}（填充的批次是精确的）"
    "。",
    "part_gemma3_packed_mask": "transformers 5.24 构建 `Gemma 3` 的滑动窗口掩码时把图像块作为 `or_mask_function`，再"
    "按每个样本重新开始的位置索引它（masking_utils.remap_positions_for_packed_sequence），图像 token 因此会关注错误"
    "的块",
    # the chat templates
    "template_unknown": "未知的模板 '{name}'。{hint}可用模板：{available}（见 `tunekit templates`）。",
    "template_no_messages": "对话至少需要一条消息",
    "template_message_shape": "消息 {index} 必须是含有 `role` 和字符串 `content` 的字典，实际为 {value}",
    "template_reasoning_not_text": "消息 {index}：`reasoning` 必须是字符串（回复的思考内容）或不出现，实际为 {type}",
    "template_role_order": "消息 {index} 的角色为 '{role}'，但必须是 {roles} 之一：对话应以用户开头，user/observation"
    " 与 assistant/function_call 交替出现（系统提示词请放在 `system` 参数中，而不是放在消息里）",
    "template_prompt_end": "render_prompt 需要以 user/observation 消息结尾的消息列表",
    "template_training_end": "训练用的对话必须以 assistant/function_call 消息结尾",
    "template_unknown_tool_format": "未知的 tool_format '{value}'；请从以下选项中选择：{formats}",
    "template_no_tools": "模板 '{name}' 无法表达工具（没有工具调用格式）；请使用支持工具的对话模板（`qwen`、`qwen3`、"
    "`llama3`、`glm4`、`mistral`、`default` 等）",
    "template_no_calls": "模板 '{name}' 无法表达函数调用",
    "jinja_no_chat_template": "模板 `jinja` 使用分词器自带的 chat_template 渲染，但{what}。请改用具名模板（例如 "
    "template: `qwen`、`llama3`、`default`；见 `tunekit templates`）。",
    "part_jinja_no_tokenizer": "没有提供分词器",
    "part_jinja_tokenizer_lacks": "该分词器没有 chat_template",
    "jinja_render_failed": "分词器的 chat_template 无法渲染此对话：{error}",
    "jinja_not_prefix_preserving": "模板 `jinja`：分词器的 chat_template 不保持前缀：加入第 {turn} 轮会改变之前各轮的"
    "渲染结果（例如 `Qwen3` 会删除之前回复中的 `<think>` 块），因此无法找到助手回复的范围。请使用该系列的具名模板（"
    "例如 qwen3）。",
    "jinja_reply_not_continued": "模板 `jinja`：第 {turn} 轮的回复没有接在 chat_template 渲染的生成提示"
    "（add_generation_prompt=True）之后；无法找到助手回复的范围。请改用具名模板。",
    # gpt-oss's harmony format
    "harmony_tool_format": "模板 '{name}' 以 `harmony` 自己的格式书写工具和调用；tool_format '{tool_format}' 无法改"
    "变它（请不要设置 tool_format）",
    "harmony_orphan_result": "消息 {index} 是工具结果（`observation`），但它前面没有 function_call：`harmony` 在所回"
    "答的调用之后写出作答的工具名（`<|start|>functions.NAME to=assistant`）：请把 function_call 消息放在它前面。",
    "harmony_parallel_calls": "消息 {index} 含有 {count} 个函数调用（{names}）；`gpt-oss`（`harmony`）每条助手消息只"
    "有一个调用（其官方对话模板只渲染第一个）：请把它们拆成每个调用一对 `function_call` / `observation` 消息",
    "harmony_schema_not_object": "{where}：`JSON schema` 必须是对象，实际为 {value}",
    "harmony_required_not_list": "{where}：`required` 必须是由属性名组成的列表，实际为 {value}",
    "harmony_unrendered": "{where}：`gpt-oss` 的官方对话模板无法渲染 '{key}'（它会把该参数声明为 `any`）；{fix}",
    "part_harmony_fix_any_of": '请把它写成 `oneOf` 或类型列表（`"type": ["string", "null"]`）',
    "part_harmony_fix_all_of": "请把这些 `schema` 合并为一个对象",
    "part_harmony_fix_ref": "请把引用的 `schema` 直接写在此处",
    "part_harmony_fix_const": "请把它写成只有一个值、类型为 `string` 的 `enum`",
    "part_harmony_fix_not": "请用 `type` / `enum` 描述允许的值",
    "harmony_default_not_text": "{where}：对 `gpt-oss` 的官方对话模板，`enum` / `oneOf` 参数的默认值必须是字符串（"
    "模板把它写成文本），实际为 {value}",
    "harmony_tool_no_name": "工具需要字符串 `name`（以及 `description`、`parameters`），实际为 {value}",
    "harmony_tool_no_description": "{where}：`gpt-oss` 的官方对话模板需要字符串 `description`（写成 `//` 注释）",
    "part_harmony_tool": "工具 '{name}'",
    "part_harmony_parameters": "{where} 的参数",
    "part_harmony_parameter": "{where} 的参数 {name}",
    "part_harmony_items": "{where}[]",
    "part_harmony_one_of": "{where}（oneOf {index}）",
    "part_harmony_property": "{where}.{name}",
}
