"""The English templates of the inference engine's errors a user can meet in the board's Chat tab, ``tunekit chat``
and the API (``infer/engine.py``, ``infer/untrusted.py``, ``infer/options.py``, ``infer/media_prompt.py``): key →
template, part of :data:`tunekit.config.problem_texts.ENGLISH`. The board says each again in Chinese
(``webui/problems_zh_infer.py``); the CLI and the API say the English.

An error carries its message as a :class:`~tunekit.config.problems.Said` (``ConfigError`` through
:func:`~tunekit.config.problems.config_error`, or ``DataError(Said(key, ...))``), so the board's ``say_error`` says it
from its key and values. A value in quotes is given as its ``repr`` (a ``str``); a media kind is a ``part_`` key.
"""

from __future__ import annotations

ENGLISH_INFER: dict[str, str] = {
    # the chat template (infer/engine.py)
    # the vLLM backend (infer/engine.py: the Chat tab's Load, tunekit chat / predict)
    "infer_vllm_missing": "infer_backend: vllm needs the vllm package (pip install vllm, on a machine with an NVIDIA "
    "GPU); or use infer_backend: huggingface (the default).",
    "infer_vllm_not_served": "infer_backend: vllm is installed but tunekit serves through the huggingface backend "
    "only for now; export the model (`tunekit export`) and serve the folder with `vllm serve EXPORT_DIR`: the "
    "exported chat_template renders exactly what tunekit renders.",
    "infer_no_template": "template is not set and the tokenizer has no chat_template: set template "
    "(e.g. qwen, llama3; `tunekit templates` lists them).",
    # control tokens written in a request (infer/untrusted.py)
    "infer_tools_control_token": "the tool definitions contain the control token {token}; remove it (tool names, "
    "descriptions and schemas cannot carry control tokens).",
    "infer_tool_call_control_token": "messages[{index}]: a tool call contains the control token {token}; remove it "
    "(tool-call arguments cannot carry control tokens).",
    "infer_message_control_token": "the text of messages[{where}] holds the control token {token} and template "
    "'{template}' rewrites that text, so it cannot be encoded as ordinary text; remove the control token from the "
    "message.",
    # generation options (infer/options.py)
    "infer_unknown_gen_options": "unknown generation option(s) {unknown}; known: {known}.",
    "infer_max_new_tokens": "max_new_tokens must be at least 1, got {value}.",
    # media in a chat (infer/engine.py, infer/media_prompt.py)
    "infer_images_text_template": "images need a vision-language model with its multimodal template "
    "(qwen2_vl for Qwen2-VL / Qwen2.5-VL); template '{template}' is text-only.",
    "infer_image_placeholders": "chat: {placed} <image> placeholder(s) in the messages but {given} image(s) given.",
    "infer_media_tokens": "the prompt holds {got} media tokens but its media need {want}: the text spells media "
    "tokens (e.g. <|image_pad|>); remove them from the messages.",
    "infer_jinja_media": "template 'jinja' (the folder's own chat template) renders text only and does not expand "
    "{media}; {model} is a vision-language model (model_type '{model_type}'): set {choice}, whose prompts are the "
    "official chat template's with each {item} expanded as the model's processor does.",
    "infer_where": "{where}: {error}",
    "infer_text_only_model": "{where}: this model (template '{template}') is text only and cannot read {media}: use a "
    "vision-language model with its multimodal template ({vision}; {audio} for audio), or remove the {media}.",
    "infer_family_media": "{where}: the {family} family reads {readable} only, not {media}. Remove the {item}, or "
    "serve a model of a family that reads {media}.",
    "part_media_images": "images",
    "part_media_videos": "videos",
    "part_media_audios": "audio",
    "part_item_images": "image",
    "part_item_videos": "video",
    "part_item_audios": "audio",
}

JOINS_INFER: dict[str, str | tuple[str, str]] = {
    "unknown": ", ",
    "choice": " or ",
    "vision": ", ",
    "audio": ", ",
    "readable": " and ",
}
