"""The export checks' problems in Chinese (a failed ``tunekit export`` or ``tunekit verify`` job's check, said on the
board): one template per key of :data:`tunekit.config.problem_texts_export.ENGLISH_EXPORT`, the same placeholders and
format specs (``tests/webui/test_problems_zh.py`` holds every key to one); tensor and file names, shapes, numbers and
code stay as they are."""

from __future__ import annotations

ZH_EXPORT: dict[str, str] = {
    "verify_no_config": "{path} 中没有 config.json：它不是模型目录（请给出 `tunekit export` 的 export_dir）。",
    "verify_no_weights": "{path} 中没有权重文件（model.safetensors 或 {index}）",
    "verify_missing_shards": "索引中列出的分片文件不存在：{shards}",
    "verify_tensor_twice": "张量 {tensor} 被存储了两次（{first} 和 {second}）",
    "verify_shard_too_big": "分片 {shard} 有 {size:,} 字节，超过了 export_size {limit} GB",
    "verify_index_mismatch": "索引与分片不一致（未写入索引的：{extra}；索引中有但分片中没有的：{absent}）",
    "verify_load_failed": "原生 transformers 无法加载 {path}：{error}",
    "verify_load_keys": "transformers 报告了 {reported}",
    "verify_shape_mismatch": "形状不一致：{shapes}",
    "part_verify_shape": "{tensor}：保存的形状为 {saved}，模型中为 {model}",
    "part_verify_renamed": "以不同于模型的名称保存的 {count} 个张量，其形状与模型其余张量的形状不一致",
    "verify_dtype_mismatch": "config.json 声明的 dtype 为 {declared}，但分片中是 {held}",
    "verify_no_chat_template": "分词器没有 chat_template：apply_chat_template 无法渲染提示",
    "verify_template_differs": "保存的 chat_template 渲染的结果与 tunekit 的 '{template}' 模板不同：{saved} 对比 "
    "{ours}",
    "verify_no_tokens": "`generate` 没有生成任何 token",
    "verify_not_merged": "导出的权重与基座模型相同：适配器没有被合并",
    "part_verify_merged_logits": "最大差值 |合并后 - (基座 + 适配器)| = {diff:.3e}，共 {positions} 个位置（{dtype} "
    "导出；适配器使 logits 最多变化 {effect:.3e}）",
    "verify_merged_logits_above": "{detail}，高于 {bound:g}",
    "verify_adapter_no_base": "adapter_config.json 没有给出 base_model_name_or_path：无法加载该适配器",
    "verify_adapter_base_missing": "适配器指定的基座模型 {base} 在本机既不是本地目录，也不在缓存中",
    "part_verify_adapter_logits": "最大差值 |导出的 - 训练的适配器| = {diff:.3e}（适配器使 logits 最多变化 "
    "{effect:.3e}）",
    "verify_adapter_no_effect": "{detail}：适配器没有任何作用",
    "verify_adapter_logits_above": "{detail}，高于 {bound:g}",
    "verify_media_no_prompt": "tunekit 无法为 {path} 渲染图像/音频提示（{error}）",
    "verify_media_no_processor_files": "{path} 中没有 {absent_files}：AutoProcessor 无法加载该模型的视觉/音频处理器。"
    "请把基座模型的处理器文件复制进去（`AutoProcessor.from_pretrained(base).save_pretrained(folder)`），"
    "或用 `tunekit export` 重新导出。",
    "part_verify_either": "{one} 或 {other}",
    "verify_media_processor_failed": "AutoProcessor 无法加载 {path}：{error}",
    "verify_media_prompt_differs": "在{conversation}上，处理器的官方渲染与 tunekit 的 '{template}' 从第 {token} 个 "
    "token 起不同：{official} 对比 {ours}",
    "part_verify_media_conversation": "图像/音频对话",
    "part_verify_text_conversation": "一段纯文本对话",
    "verify_media_tensors_differ": "对同一{media}，处理器给出的 {tensor_names} 与 tunekit 的不同",
    "part_verify_image": "图像",
    "part_verify_audio": "音频",
    "part_verify_media": "媒体",
    "part_verify_media_logits": "最大差值 |合并后 - (基座 + 适配器)| = {diff:.3e}，共 {positions} 个位置，带{media}"
    "（{dtype} 导出；适配器使 logits 最多变化 {effect:.3e}）",
    "verify_media_greedy_differs": "贪心解码的 token ID 从第 {token} 个起与基座 + 适配器的不同（{merged} 对比 "
    "{adapter}），而该处最大的两个 logits 相差 {margin:.2e}，超过了 logits 差值 {diff:.2e} 的两倍",
    "verify_gguf_missing": "tunekit_export.json 中指定的 GGUF 文件 {file} 不在 {path} 中",
    "verify_gguf_unreadable": "gguf 包无法读取 {file}：{error}",
    "verify_gguf_load_failed": "llama.cpp 无法加载 {file}：{error}",
    "verify_gguf_tokens_differ": "llama.cpp 对套用聊天模板的{text_kind}的分词与训练时不同：第一处差异在第 {token} 个 "
    "token（llama.cpp 为 {ours}，训练时为 {trained}；共 {ours_count} 对比 {trained_count} 个 token），文本为 {text}",
    "part_verify_gguf_conversation": "对话",
    "part_verify_gguf_prompt": "提示",
    "part_verify_gguf_logits": "{kind}：下一个 token 的 logits 上的最大差值 |llama.cpp - transformers| = {diff:.3e}，"
    "界限 {bound:.3e}（一阶估计，{stages} 个舍入阶段；gguf_verify.py）{adapter_effect}",
    "part_verify_gguf_effect": "；适配器使这些 logits 最多变化 {effect:.3e}",
    "verify_gguf_logits_above": "{detail}：超过了界限",
    "part_verify_gguf_greedy": "{kind}：transformers 贪心续写的 {steps} 个 token 上，最大差值 |llama.cpp - "
    "transformers| 为 {diff:.3e}（该步的界限为 {bound:.3e}）；llama.cpp 的 top-1 在 {same}/{steps} 步与 transformers "
    "的相同，其中 {judged} 步参与判定（top-1 领先幅度超过界限的两倍），其余只计数",
    "verify_gguf_greedy_above": "{detail}：第 {at_steps} 步的 logits 超过了界限",
    "verify_gguf_greedy_top1": "{detail}：参与判定的第 {at_steps} 步的 top-1 不同",
    "verify_gguf_no_template": "该 GGUF 没有 tokenizer.chat_template：基于 llama.cpp 的运行时无法渲染聊天提示",
    "verify_gguf_template_differs": "该 GGUF 的聊天模板（tokenizer.chat_template，基于 llama.cpp 的运行时用它渲染）"
    "渲染出 {rendered}，而 tunekit 的 '{template}' 模板渲染出 {ours}",
    "gptq_check_no_layers": "导出中没有量化层（weight_packed）",
    "gptq_check_reload_differs": "重新加载的模型的 logits 与用它存储的权重算出的 logits 最多相差 {mismatch:.3g}"
    "（该目录重新加载后得到的不是它存储的权重）",
    "gptq_check_above_rtn": "在校准文本上，logits 的相对均方根误差 {error:.4f} 超过了同一网格上就近取整的 {rtn:.4f}",
}

JOINS_ZH_EXPORT: dict[str, str | tuple[str, str]] = {
    "problems": "；",
    "shards": "、",
    "reported": "；",
    "shapes": "；",
    "absent_files": "、",
    "tensor_names": "、",
}
