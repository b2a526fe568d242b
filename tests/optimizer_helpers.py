"""Tiny causal LMs and the pieces that build and step an optimizer on them as tunekit's trainer does."""

from __future__ import annotations

import torch

from tunekit.config import Config, load_config

ARCHS = {  # qwen2 has q/k/v biases and tied embeddings; llama has GQA and a separate LM head
    "llama": dict(
        model_type="llama",
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
    ),
    "qwen2": dict(
        model_type="qwen2",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=384,
        tie_word_embeddings=True,
    ),
}


def optimizer_config(**opts) -> Config:
    """A full fine-tuning config for the optimizer tests: ``opts`` choose the optimizer."""
    return load_config(
        None,
        dict(
            finetuning_type="full",
            cutoff_len=32,
            per_device_train_batch_size=1,
            gradient_checkpointing=False,
            learning_rate=1e-2,
            weight_decay=0.01,
            **opts,
        ),
    )


def tiny_causal_lm(arch: str, tmp_path=None):
    """A seeded random float32 model of ``ARCHS[arch]`` in training mode (its config saved under ``tmp_path``)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(ARCHS[arch])
    hf = AutoConfig.for_model(fields.pop("model_type"), **fields)
    if tmp_path is not None:
        hf.save_pretrained(tmp_path / arch)
    hf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf, dtype=torch.float32)
    model.train()
    return model


def training_arguments(cfg: Config):
    """The TrainingArguments tunekit builds for ``cfg`` (no output is written)."""
    from tunekit.train.arguments import build_training_arguments

    return build_training_arguments(cfg.model_copy(update={"output_dir": "/tmp/tunekit-unused"}), [])


def decay_names(model) -> list[str]:
    """The parameters the Hugging Face Trainer applies weight decay to."""
    from transformers import Trainer

    return Trainer.get_decay_parameter_names(None, model)


def backward(model, seed: int = 1) -> None:
    """One backward pass of the causal-LM loss on seeded random ids (2 rows of 12)."""
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(seed))
    model(input_ids=ids, labels=ids).loss.backward()


def weights_of(model) -> dict:
    """A copy of every parameter, by name."""
    return {n: p.detach().clone() for n, p in model.named_parameters()}
