"""Every key of LLaMA-Factory's v0 example configs takes effect in tunekit: what a run showed to be silently ignored
or substituted, pinned on the mechanism it went through (tiny models, no network; LLaMA-Factory's examples are not
read here, the keys each test uses are written out with the example they come from)."""

from __future__ import annotations

import pytest
import torch

from tests.optimizer_helpers import backward, decay_names, tiny_causal_lm, training_arguments
from tunekit.config import load_config
from tunekit.train.optimizers import build_optimizer

# examples/extras/badam/llama3_full_sft.yaml: the method keys (weight_decay is LLaMA-Factory's default, 0.0)
BADAM = dict(
    finetuning_type="full",
    use_badam=True,
    badam_mode="layer",
    badam_switch_mode="ascending",
    badam_switch_interval=50,
    badam_verbose=2,
)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_badam_decays_the_active_block_by_the_configured_weight_decay(weight_decay, capsys):
    """With zero gradients an AdamW step only decays: each active weight is scaled by exactly 1 - lr * weight_decay,
    biases (badam's no-decay group) are left as they are. AdamW's own default (0.01) must never apply."""
    lr = 0.5
    cfg = load_config(
        None,
        dict(
            BADAM,
            cutoff_len=32,
            per_device_train_batch_size=1,
            gradient_checkpointing=False,
            learning_rate=lr,
            weight_decay=weight_decay,
        ),
    )
    model = tiny_causal_lm("qwen2")  # q/k/v biases
    opt = build_optimizer(cfg, training_arguments(cfg), model, decay_names(model))
    active = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert any("bias" in n for n in active) and any("bias" not in n for n in active)
    backward(model)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.zero_()
    opt.step()
    params = dict(model.named_parameters())
    for name, before in active.items():
        decay = 0.0 if "bias" in name else weight_decay
        assert torch.equal(params[name].detach(), before * (1 - lr * decay)), name


# The keys of LLaMA-Factory's v0 examples that tunekit lacks, with the example that writes them: each is refused by
# its name before anything loads (a run showed each was silently ignored), never dropped.
LACKING = {
    "extras/mod/llama3_full_sft.yaml": dict(
        finetuning_type="full", mixture_of_depths="convert", optim="paged_adamw_8bit"
    ),
}
LACKED = {
    "extras/mod/llama3_full_sft.yaml": ["mixture_of_depths"],
}


@pytest.mark.parametrize("example", list(LACKING))
def test_example_keys_tunekit_lacks_are_refused_by_name(example, tmp_path):
    import yaml

    from tunekit.errors import ConfigError

    path = tmp_path / "example.yaml"
    path.write_text(
        yaml.safe_dump(
            dict(
                model_name_or_path="m",
                stage="sft",
                do_train=True,
                dataset="identity",
                output_dir=str(tmp_path / "out"),
                **LACKING[example],
            )
        ),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    for key in LACKED[example]:
        assert f"`{key}` is a LLaMA-Factory option that tunekit does not support (yet) (in {path}): remove it" in str(
            err.value
        ), example
