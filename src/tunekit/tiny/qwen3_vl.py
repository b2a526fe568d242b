"""Tiny random-weight Qwen3-VL (``Qwen3VLForConditionalGeneration``), built locally in a few seconds.

As :mod:`tunekit.tiny.qwen2_vl` for Qwen2-VL: the real transformers class with tiny sizes (interleaved M-RoPE,
DeepStack merger on vision layer 0, learned position embeddings of the vision tower), random weights from a
fixed seed, the byte-level BPE tokenizer of ``tokenizer.py`` with Qwen3-VL's special tokens, the official chat
template of Qwen/Qwen3-VL-8B-Instruct (verbatim; its SHA-256 is pinned in tests/multimodal/test_vlm_qwen3.py),
and saved processor configs: ``preprocessor_config.json`` (the PIL/numpy ``Qwen2VLImageProcessorPil`` with Qwen3-VL's
16-pixel patches and 0.5 mean/std, as the real checkpoints ship it) and ``video_preprocessor_config.json``
(``Qwen3VLVideoProcessor``'s fields; tunekit reads it without torchvision, ``data/mm_plugins/video.py``).
Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from .multimodal import DEFAULT_SIZES, QWEN_VL_SPECIAL, TinySizes, new_folder, random_model, save_tokenizer
from .tokenizer import TOKENIZERS

QWEN3_VL_TOKENS = replace(TOKENIZERS["qwen3"], name="qwen3_vl", template="qwen3_vl_nothink", special=QWEN_VL_SPECIAL)

#: Qwen/Qwen3-VL-8B-Instruct's chat_template, verbatim (5292 bytes)
QWEN3_VL_CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {%- if messages[0].content is string %}\n"
    "            {{- messages[0].content }}\n"
    "        {%- else %}\n"
    "            {%- for content in messages[0].content %}\n"
    "                {%- if 'text' in content %}\n"
    "                    {{- content.text }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '\\n\\n' }}\n"
    "    {%- endif %}\n"
    '    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are'
    ' provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments'
    ' within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\":'
    ' <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' }}\n"
    "        {%- if messages[0].content is string %}\n"
    "            {{- messages[0].content }}\n"
    "        {%- else %}\n"
    "            {%- for content in messages[0].content %}\n"
    "                {%- if 'text' in content %}\n"
    "                    {{- content.text }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set image_count = namespace(value=0) %}\n"
    "{%- set video_count = namespace(value=0) %}\n"
    "{%- for message in messages %}\n"
    '    {%- if message.role == "user" %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' }}\n"
    "        {%- if message.content is string %}\n"
    "            {{- message.content }}\n"
    "        {%- else %}\n"
    "            {%- for content in message.content %}\n"
    "                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}\n"
    "                    {%- set image_count.value = image_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|image_pad|><|vision_end|>\n"
    "                {%- elif content.type == 'video' or 'video' in content %}\n"
    "                    {%- set video_count.value = video_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|video_pad|><|vision_end|>\n"
    "                {%- elif 'text' in content %}\n"
    "                    {{- content.text }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' }}\n"
    "        {%- if message.content is string %}\n"
    "            {{- message.content }}\n"
    "        {%- else %}\n"
    "            {%- for content_item in message.content %}\n"
    "                {%- if 'text' in content_item %}\n"
    "                    {{- content_item.text }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and message.content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    '                {{- \'<tool_call>\\n{"name": "\' }}\n'
    "                {{- tool_call.name }}\n"
    '                {{- \'", "arguments": \' }}\n'
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {%- if message.content is string %}\n"
    "            {{- message.content }}\n"
    "        {%- else %}\n"
    "            {%- for content in message.content %}\n"
    "                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}\n"
    "                    {%- set image_count.value = image_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|image_pad|><|vision_end|>\n"
    "                {%- elif content.type == 'video' or 'video' in content %}\n"
    "                    {%- set video_count.value = video_count.value + 1 %}\n"
    "                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}\n"
    "                    <|vision_start|><|video_pad|><|vision_end|>\n"
    "                {%- elif 'text' in content %}\n"
    "                    {{- content.text }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

#: the tiny processors' pixel budgets: a 256x256 image gives (256/32)^2 = 64 image tokens at most; a video's
#: budget counts all its frames (Qwen3-VL's video smart_resize), 64x64 pixels per frame at 16 frames
TINY_IMAGE_PIXELS = (32 * 32, 256 * 256)
TINY_VIDEO_PIXELS = (2 * 32 * 32, 16 * 64 * 64)
HALF_MEAN = [0.5, 0.5, 0.5]


def _config(
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    vocab_size: int,
    ids: dict[str, int],
    max_positions: int,
):
    from transformers import AutoConfig

    head_dim = hidden_size // num_heads
    half = head_dim // 2
    section = [half - 2 * (5 * half // 16), 5 * half // 16, 5 * half // 16]  # real models: [24, 20, 20] of 64
    text = dict(
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        vocab_size=vocab_size,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": section,
            "mrope_interleaved": True,
        },
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        initializer_range=0.02,
        tie_word_embeddings=False,
    )
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        in_channels=3,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=hidden_size,
        num_position_embeddings=64,
        deepstack_visual_indexes=[0],
        hidden_act="gelu_pytorch_tanh",
        initializer_range=0.02,
    )
    return AutoConfig.for_model(
        "qwen3_vl",
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def _save_processors(out: Path) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    lo, hi = TINY_IMAGE_PIXELS
    Qwen2VLImageProcessorPil(
        size={"shortest_edge": lo, "longest_edge": hi},
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=HALF_MEAN,
        image_std=HALF_MEAN,
    ).save_pretrained(out)
    lo, hi = TINY_VIDEO_PIXELS
    video = {
        "video_processor_type": "Qwen3VLVideoProcessor",
        "processor_class": "Qwen3VLProcessor",
        "size": {"shortest_edge": lo, "longest_edge": hi},
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": HALF_MEAN,
        "image_std": HALF_MEAN,
        "rescale_factor": 1 / 255,
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "resample": 3,
        "do_sample_frames": True,
        "fps": 2,
        "min_frames": 4,
        "max_frames": 768,
    }
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2) + "\n", encoding="utf-8")


def build_tiny_qwen3_vl(
    out_dir: str | os.PathLike, like: str = "qwen3-vl", seed: int = 0, sizes: TinySizes = DEFAULT_SIZES
) -> Path:
    """Write a tiny random Qwen3-VL (weights, tokenizer, chat template, image + video processor configs) into
    ``out_dir``."""
    from transformers import AutoModelForImageTextToText

    fam = QWEN3_VL_TOKENS
    out, tokenizer, model_vocab = new_folder(out_dir, fam, QWEN3_VL_CHAT_TEMPLATE, sizes)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*fam.special, *fam.extra)}
    config = _config(
        sizes.hidden_size,
        sizes.num_layers,
        sizes.num_heads,
        sizes.num_kv_heads,
        model_vocab,
        ids,
        sizes.max_position_embeddings,
    )
    model = random_model(AutoModelForImageTextToText, config, seed, fam, ids)
    model.save_pretrained(out)
    _save_processors(out)
    save_tokenizer(out, tokenizer, fam)
    return out
