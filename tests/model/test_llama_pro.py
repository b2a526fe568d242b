"""LLaMA Pro: `tunekit expand-blocks` interleaves zero-output copies of blocks (same outputs as the original, bit for
bit), and use_llama_pro trains exactly the inserted blocks (model and planner agree)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.cli.main import dispatch
from tunekit.config import load_config


@pytest.mark.parametrize("num_expand, new_ids", [(1, [2]), (2, [1, 3])])
def test_expanded_model_computes_the_same_outputs(tiny_qwen, tmp_path, num_expand, new_ids):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "pro"
    assert dispatch(["expand-blocks", str(tiny_qwen), str(out), "--num-expand", str(num_expand)]) == 0
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2 + num_expand
    assert (out / "tokenizer.json").is_file()
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
    pro = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        assert torch.equal(base(input_ids=ids).logits, pro(input_ids=ids).logits)  # the copies add exact zeros
    layers = pro.model.layers
    for i in new_ids:
        assert layers[i].self_attn.o_proj.weight.abs().sum() == 0 and layers[i].mlp.down_proj.weight.abs().sum() == 0
        assert torch.equal(layers[i].self_attn.q_proj.weight, layers[i - 1].self_attn.q_proj.weight)


def test_use_llama_pro_trains_only_the_new_blocks(tiny_qwen, tmp_path):
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup

    out = tmp_path / "pro"
    dispatch(["expand-blocks", str(tiny_qwen), str(out), "--num-expand", "2"])
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(out),
            "template": "qwen",
            "finetuning_type": "freeze",
            "use_llama_pro": True,
            "freeze_trainable_layers": 2,
        },
    )
    model = load_model(cfg, load_tokenizer(cfg))
    trained = {n.split(".")[2] for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {"1", "3"}
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count_params(load_shape(None, str(out)), resolve_setup(cfg)).trainable == n_trainable

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    from tunekit.flow import run_train

    run_train(
        load_config(
            None,
            base_config(
                out,
                data,
                tmp_path / "run",
                finetuning_type="freeze",
                use_llama_pro=True,
                freeze_trainable_layers=2,
                max_steps=2,
            ),
        )
    )


def test_expand_blocks_refuses_a_count_that_does_not_divide(tiny_qwen, tmp_path, capsys):
    assert dispatch(["expand-blocks", str(tiny_qwen), str(tmp_path / "x"), "--num-expand", "3"]) != 0
    captured = capsys.readouterr()
    assert f"--num-expand 3 must divide the 2 layers of {tiny_qwen} (e.g. 1, 2)." in captured.out + captured.err
