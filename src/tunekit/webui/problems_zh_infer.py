"""The inference engine's errors in Chinese (the board's Chat tab): one template per key of
:data:`tunekit.config.problem_texts_infer.ENGLISH_INFER`, the same placeholders and format specs
(``tests/webui/test_problems_zh.py`` holds every key to one); option names, values, paths and code stay as they are."""

from __future__ import annotations

ZH_INFER: dict[str, str] = {
    "infer_vllm_missing": "infer_backend: vllm 需要 vllm 包（`pip install vllm`，在有 NVIDIA GPU 的机器上安装）；"
    "或使用 infer_backend: huggingface（默认）。",
    "infer_vllm_not_served": "已安装 vllm，但 tunekit 目前只通过 huggingface 后端推理（infer_backend: vllm 暂不"
    "可用）：请导出模型（`tunekit export`），再用 `vllm serve EXPORT_DIR` 提供该目录的服务：导出的 "
    "chat_template 渲染的内容与 tunekit 完全一致。",
    "infer_no_template": "未设置 template，且分词器没有 chat_template：请设置 template（例如 `qwen`、`llama3`；"
    "`tunekit templates` 会列出全部模板）。",
    "infer_tools_control_token": "工具定义中含有控制 token {token}：请删除它（工具的名称、描述和参数结构中不能出现"
    "控制 token）。",
    "infer_tool_call_control_token": "`messages[{index}]`：工具调用中含有控制 token {token}：请删除它（工具调用的"
    "参数中不能出现控制 token）。",
    "infer_message_control_token": "`messages[{where}]` 的文本含有控制 token {token}，而模板 '{template}' 会改写这段"
    "文本，因此无法把它编码为普通文本：请从消息中删除该控制 token。",
    "infer_unknown_gen_options": "未知的生成参数 {unknown}；可用的参数：{known}。",
    "infer_max_new_tokens": "max_new_tokens 至少为 1，当前为 {value}。",
    "infer_images_text_template": "图片需要视觉语言模型及其多模态模板（Qwen2-VL / Qwen2.5-VL 用 `qwen2_vl`）；模板 "
    "'{template}' 只能处理文本。",
    "infer_image_placeholders": "对话：消息中有 {placed} 个 `<image>` 占位符，但给出了 {given} 张图片。",
    "infer_media_tokens": "提示中有 {got} 个媒体 token，而其中的媒体需要 {want} 个：文本里直接写了媒体 token（例如 "
    "`<|image_pad|>`）；请从消息中删除它们。",
    "infer_jinja_media": "模板 `jinja`（模型目录自带的对话模板）只渲染文本，不会展开{media}；{model} 是视觉语言模型"
    "（model_type '{model_type}'）：请设置 {choice}，它的提示与官方对话模板一致，并像模型的处理器那样展开每个{item}。",
    "infer_where": "{where}：{error}",
    "infer_text_only_model": "{where}：该模型（模板 '{template}'）只能处理文本，无法读取{media}：请使用视觉语言模型"
    "及其多模态模板（{vision}；音频用 {audio}），或删除{media}。",
    "infer_family_media": "{where}：{family} 系列只能读取{readable}，不能读取{media}。请删除该{item}，或使用能读取"
    "{media}的模型系列。",
    "part_media_images": "图片",
    "part_media_videos": "视频",
    "part_media_audios": "音频",
    "part_item_images": "图片",
    "part_item_videos": "视频",
    "part_item_audios": "音频",
}

JOINS_ZH_INFER: dict[str, str | tuple[str, str]] = {
    "unknown": "、",
    "choice": " 或 ",
    "vision": "、",
    "audio": "、",
    "readable": "和",
}
