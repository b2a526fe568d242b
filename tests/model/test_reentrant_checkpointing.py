"""``use_reentrant_gc`` (LLaMA-Factory's option; transformers' ``gradient_checkpointing_kwargs: {use_reentrant: B}``
reads as it): the loaded model checkpoints its decoder layers with the implementation asked for, and the two give the
same gradients (both recompute the same forward operations in the same order: equal bit for bit)."""

from __future__ import annotations

import torch

from tunekit.config import load_config
from tunekit.model.loader import load_model, load_tokenizer


def _checkpointed_grads(model_dir, out, reentrant: bool) -> tuple[set, dict[str, torch.Tensor]]:
    cfg = load_config(
        None,
        dict(
            model_name_or_path=str(model_dir),
            output_dir=str(out),
            finetuning_type="lora",
            lora_target="all",
            gradient_checkpointing=True,
            use_reentrant_gc=reentrant,
        ),
    )
    torch.manual_seed(0)  # the same LoRA initialisation for both
    model = load_model(cfg, load_tokenizer(cfg))
    model.train()
    used = {
        module._gradient_checkpointing_func.keywords["use_reentrant"]
        for module in model.modules()
        if getattr(module, "gradient_checkpointing", False)
    }
    ids = torch.arange(3, 19).view(2, 8)
    model(input_ids=ids, labels=ids).loss.backward()
    return used, {name: p.grad for name, p in model.named_parameters() if p.requires_grad}


def test_the_layers_checkpoint_the_way_asked_with_the_same_gradients(tiny_qwen, tmp_path):
    used, reentrant = _checkpointed_grads(tiny_qwen, tmp_path, True)
    assert used == {True}
    used, plain = _checkpointed_grads(tiny_qwen, tmp_path, False)
    assert used == {False}
    assert reentrant.keys() == plain.keys() and any(g.abs().sum() > 0 for g in plain.values())
    for name, grad in reentrant.items():
        assert torch.equal(grad, plain[name]), name
