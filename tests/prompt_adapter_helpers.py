"""Plain-PEFT prefix (``ptuning``) and prompt (``prompt``) models on the tiny Qwen2, for the prompt-adapter tests."""

from __future__ import annotations

import torch


def peft_prompt_model(tiny_qwen, kind: str, *, steer: bool = False):
    """A PEFT ``ptuning`` (4 virtual tokens) or ``prompt`` (5) model on ``tiny_qwen``, seeded. With ``steer`` its
    values change the tiny random model's greedy reply (which mostly repeats one token): a prefix of large values, or
    a prompt copied from five token embeddings."""
    from peft import PrefixTuningConfig, PromptTuningConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    config = (
        PrefixTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=4)
        if kind == "ptuning"
        else PromptTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=5)
    )
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32), config)
    if steer:
        weight = model.prompt_encoder["default"].embedding.weight
        with torch.no_grad():
            if kind == "ptuning":
                weight.normal_(0.0, 10.0)
            else:
                weight.copy_(model.get_input_embeddings().weight[[866, 1016, 398, 649, 527]])
    return model
