"""Generation options shared by chat, api and predict."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import OptionGroup


class InferOptions(OptionGroup):
    GROUP = "infer"
    TITLE = "Generation"

    infer_backend: Literal["huggingface", "vllm"] = Field("huggingface", description="Inference engine.")
    infer_dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="Weight dtype for inference."
    )
    do_sample: bool = Field(True, description="Sample (true) or greedy decoding (false).")
    temperature: float = Field(0.95, ge=0, description="Sampling temperature.")
    top_p: float = Field(0.7, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(50, ge=0, description="Top-k sampling (0 = off).")
    num_beams: int = Field(1, ge=1, description="Beam search width.")
    max_new_tokens: int = Field(512, ge=1, description="Maximum tokens generated per reply.")
    repetition_penalty: float = Field(1.0, gt=0, description="Penalty for repeated tokens (1 = none).")
    length_penalty: float = Field(1.0, description="Beam-search length penalty.")
    predict_with_generate: bool = Field(True, description="Predict by generating (for do_predict).")
    generation_seed: int | None = Field(
        None,
        ge=0,
        le=2**64 - 1,
        description="Seed for sampled replies in chat, api and the board (reply i of n uses generation_seed + i); "
        "unset: every reply is sampled from fresh randomness. An API request's seed overrides it. "
        "predict / do_predict use the training seed.",
    )
    api_max_tokens: int = Field(
        4096,
        ge=1,
        description="API: the largest max_tokens a request may ask for (400 above it); "
        "also bounded by the model's context minus the prompt.",
    )
    api_queue_timeout: float = Field(
        30.0,
        ge=0,
        description="API: seconds a request waits for a place when 1 + "
        "api_max_queue requests are already being served; then "
        "it is answered 429 with Retry-After.",
    )
    api_max_queue: int = Field(
        16,
        ge=0,
        description="API: 1 + api_max_queue requests are served at once, their "
        "generations taking turns token by token (a model whose "
        "generations cannot take turns: one at a time); up to "
        "api_max_queue more wait for a place (api_queue_timeout), "
        "further ones are answered 429 right away.",
    )
    api_stream_timeout: float = Field(
        30.0,
        gt=0,
        description="API: seconds a streamed chunk may wait for the client to "
        "read it; a client that stops reading is dropped and its "
        "generation cancelled.",
    )
    api_parse_special_tokens: bool = Field(
        False,
        description="API: parse control tokens (e.g. <|im_end|>) written in "
        "request messages as control tokens. Off: such text is "
        "encoded as ordinary text, so a client cannot forge role "
        "boundaries. Training data is unaffected.",
    )
    api_media_dir: str | None = Field(
        None,
        description="API: the folder whose files clients may name in image_url / video_url / audio_url parts "
        "(file:// URLs or paths; symlinks and .. are resolved, anything outside is refused). Unset: no "
        "file is read and media come inline as base64 data: URLs only. LLaMA-Factory's SAFE_MEDIA_PATH "
        "environment variable is read when this is unset.",
    )
    api_max_media_mb: float = Field(
        20.0,
        gt=0,
        description="API: the largest image, video or audio a request may send, "
        "in MB (10^6 bytes) decoded (413 above it).",
    )
