"""Generation options shared by chat, api and predict."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .base import OptionGroup


class InferOptions(OptionGroup):
    GROUP = "infer"
    TITLE = "Generation"

    infer_backend: Literal["huggingface", "vllm"] = Field("huggingface", description="Inference engine.")
    infer_dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field("auto", description="Weight dtype for inference.")
    do_sample: bool = Field(True, description="Sample (true) or greedy decoding (false).")
    temperature: float = Field(0.95, ge=0, description="Sampling temperature.")
    top_p: float = Field(0.7, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(50, ge=0, description="Top-k sampling (0 = off).")
    num_beams: int = Field(1, ge=1, description="Beam search width.")
    max_new_tokens: int = Field(512, ge=1, description="Maximum tokens generated per reply.")
    repetition_penalty: float = Field(1.0, gt=0, description="Penalty for repeated tokens (1 = none).")
    length_penalty: float = Field(1.0, description="Beam-search length penalty.")
    predict_with_generate: bool = Field(True, description="Predict by generating (for do_predict).")
