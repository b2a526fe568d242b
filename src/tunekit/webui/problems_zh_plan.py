"""The memory planner's errors in Chinese: one template per key of
:data:`tunekit.config.problem_texts_plan.ENGLISH_PLAN`, with the same placeholders (part of ``problems_zh.ZH``;
``tests/webui/test_problems_zh.py`` holds every key to one). Option names, values, paths, command-line flags and
the library's own error text stay as they are."""

from __future__ import annotations

ZH_PLAN: dict[str, str] = {
    "plan_no_config_json": "模型目录 {path} 中没有 config.json：请把 model_name_or_path 指向 Hugging Face 模型目录，"
    "或用 `--model-config` 指定一个 config.json 或以下内置架构之一：{names}。",
    "plan_model_unknown": "model_name_or_path {name} 既不是磁盘上的目录，也不是内置架构，因此无法得知它的 "
    "config.json：请下载该模型的 config.json 并用 `--model-config PATH` 指定，或使用以下内置架构之一：{names}。",
    "plan_config_unreadable": "{path} 不是可读取的 config.json：{error}",
    "plan_no_model_type": "{name} 的 config.json 没有 model_type：它不是 Hugging Face 模型配置。",
    "plan_config_invalid": "{name} 的 config.json 不是有效的 {model_type} 配置（{error}）；请修正该字段。",
    "plan_model_type_unknown": "transformers 不认识 model_type {model_type}（{name}）：{error}",
    "plan_cannot_build": "无法在 `meta` 设备上把 {name}（{model_type}）构建为因果语言模型：{error}",
    "plan_head_split": "{name} 的 config.json：hidden_size {hidden} 不能均分为 num_attention_heads {heads} 个注意力头"
    "（且没有给出 head_dim）；请修正其中之一。",
    "plan_no_layers": "{name}：找不到解码器层。",
    "plan_lora_target_missing": "lora_target 指定的 {missing} 不是 {name} 的线性层；可用的有：{available}（或 "
    "lora_target: all）。",
    "plan_freeze_layers_range": "freeze_trainable_layers {k} 必须在 -{n} 到 {n} 之间（且不为 0）：该模型有 {n} 层。",
    "plan_vlm_prompt": "finetuning_type {method} 在 tunekit 中只用于纯文本模型：{name} 是视觉语言（或音频）模型；"
    "请使用 finetuning_type lora、freeze 或 full。",
    "plan_vlm_oft": "finetuning_type oft 只为视觉语言模型 {name} 的语言模型部分规划（其视觉编码器和投影层冻结）：请把 "
    "freeze_vision_tower 和 freeze_multi_modal_projector 设为 true，或使用 finetuning_type lora、freeze 或 full。",
    "plan_additional_target_missing": "additional_target 指定的 {target} 不在 {name} 的层之外（例如 embed_tokens、"
    "lm_head）。",
    "plan_freeze_modules_missing": "freeze_trainable_modules 指定的 {missing} 不在模型的层中。",
    "plan_freeze_extra_missing": "freeze_extra_modules 指定的 {missing} 在模型中不存在（例如 `embed_tokens`、"
    "`norm`、`lm_head`）。",
    "plan_positive": "{name} 必须是 >= 1 的整数，实际为 {value}。",
    "plan_shard_fewer": "{what} 会把 {name} 的 {trainable} 个可训练参数分片到 {n} 个 GPU 上，每个 GPU 不足一个：请减少"
    " GPU 数量（`--gpus`），或改用普通数据并行（删除 deepspeed/fsdp）。",
    "plan_shard_small": "{what} 分片到 {n} 个 GPU 后，{name} 每个 GPU 只剩 {per_gpu} 个可训练参数：分片这么小的模型"
    "得不偿失；请最多使用 {most} 个 GPU，或不用 ZeRO。",
    "plan_val_size_no_train": "val_size {val_size:g} 使 {samples} 个样本中没有剩下训练样本：请减小 val_size。",
    "plan_cp_world": "cp_size {cp} 把每条序列切分到 {cp} 个进程上，但本次规划只有 {world} 个进程：请按 {cp} 的整数倍"
    "规划（`--gpus` 每节点 GPU 数 x `--nodes`，或 `NPROC_PER_NODE x NNODES`），或删除 cp_size。",
    "plan_model_config_unknown": "`--model-config` {name} 既不是 "
    "config.json，也不是模型目录或内置架构。内置架构：{names}。",
    "plan_no_model": "没有指定模型：请在配置中设置 model_name_or_path，或传入 `--model-config NAME|PATH`。",
    "plan_gpu_unknown": "未知的 GPU {name}。已知的 GPU：{known}；或用 `--gpu-memory GiB` 给出它的显存。",
    "plan_gpu_memory_positive": "`--gpu-memory` 必须是正的 `GiB` 数，实际为 {memory}。",
    "plan_gpu_both": "`--gpu NAME` 和 `--gpu-memory GiB` 只能给出其中之一。",
    "plan_auto_fit_no_gpu": "`--auto-fit` 需要一个要适配的 GPU：请传入 `--gpu NAME` 或 `--gpu-memory GiB`。",
    "plan_auto_fit_nothing": "auto_fit：{gpu}（{memory} `GiB`）上什么都放不下：最小的配置（{rung}）还需要 {short} "
    "`GiB`{more}。运行 `tunekit plan` 查看明细。",
    "part_fit_more_gpus": "，或使用 ZeRO-3 的 {n} 个 GPU",
    "plan_no_video": "{family} 系列没有视频输入：请不带 `--videos` 进行规划。",
}

# the parts of an auto-fit set-up (problem_texts_plan.RUNGS) in Chinese: a problem's and the planner's notes' (the
# ``plan_rung*`` entries of webui/i18n.py are these)
RUNGS_ZH: dict[str, str] = {
    "rung": "{parts}",
    "rung_no_ckpt": "不用梯度检查点",
    "rung_ckpt": "梯度检查点",
    "rung_liger_loss": "Liger 融合损失",
}
RUNG_JOINS_ZH: dict[str, str] = {"parts": " + "}

# placeholder → how a tuple of values is joined in Chinese (the same placeholders as problem_texts_plan.JOINS_PLAN)
JOINS_ZH_PLAN: dict[str, str | tuple[str, str]] = {"missing": "、", "available": "、", **RUNG_JOINS_ZH}
