"""``moe_aux_loss_coef``: the router's load-balancing loss joins the loss of each forward (CE + coef x aux, with aux as
transformers' ``load_balancing_loss_func`` computes it from the router logits) on every loss path, is logged as
``moe/aux_loss`` in trainer_log.jsonl, and is refused on a dense model and on stages that compute their own loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import alpaca_records, base_config, padded_lm_batch, train_rows, write_dataset
from tests.tolerances import FP32_U, loss_tolerance
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.model.loader import load_model, load_tokenizer
from tunekit.model.moe import take_router_aux
from tunekit.tiny.text import build_tiny_model

COEF = 0.25


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("q3moe") / "model", like="qwen3-30b-a3b", seed=0)


def _reference(model, ids, mask, labels) -> tuple[float, float]:
    """(CE + COEF x aux, aux) from one forward: the cross-entropy as transformers' causal-LM loss takes it (logits in
    float32, mean over the trained tokens), aux from the router logits by transformers' own function."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
        ce = F.cross_entropy(out.logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        cfg = model.config
        aux = load_balancing_loss_func(out.router_logits, cfg.num_experts, cfg.num_experts_per_tok, mask)
    return ce.item() + COEF * aux.item(), aux.item()


@pytest.mark.parametrize("trained_tokens_loss", [True, False])
def test_one_forward_loss_is_ce_plus_coef_times_the_router_loss(qwen3_moe, tmp_path, trained_tokens_loss):
    from transformers import TrainingArguments

    from tunekit.train.trainer import TunekitTrainer

    cfg = load_config(
        None,
        {
            "model_name_or_path": str(qwen3_moe),
            "template": "qwen3",
            "finetuning_type": "lora",
            "dtype": "float64",
            "moe_aux_loss_coef": COEF,
            "trained_tokens_loss": trained_tokens_loss,
            "output_dir": str(tmp_path / "out"),
        },
    )
    model = load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    base = model.get_base_model()
    assert (base.config.output_router_logits, base.config.router_aux_loss_coef) == (True, COEF)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none")
    trainer = TunekitTrainer(model=model, args=args, tunekit_config=cfg)
    ids, mask, labels = padded_lm_batch(base.config.vocab_size)
    model.train()
    loss = trainer.compute_loss(model, {"input_ids": ids, "attention_mask": mask, "labels": labels})
    logged = take_router_aux(model)  # what trainer_log.jsonl gets, read before the reference forward below
    expected, aux = _reference(model, ids, mask, labels)
    n = int((labels[:, 1:] != -100).sum())
    assert aux > 0 and abs(loss.item() - expected) <= loss_tolerance(n, expected), (loss.item(), expected)
    assert logged == {"moe/aux_loss": round(aux, 6)}
    take_router_aux(model)
    assert take_router_aux(model) == {}  # read once


def test_the_router_loss_is_added_and_logged_in_a_run(qwen3_moe, tmp_path, capsys):
    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8, seed=1))
    rows = {}
    for name, extra in (("plain", {}), ("aux", {"moe_aux_loss_coef": COEF})):
        out = tmp_path / name
        run_train(load_config(None, base_config(qwen3_moe, data, out, template="qwen3", max_steps=2, **extra)))
        rows[name] = train_rows(out)
    assert "router auxiliary loss: 0.25 x load-balancing loss added" in capsys.readouterr().out
    assert all("moe/aux_loss" not in r for r in rows["plain"]) and all(r["moe/aux_loss"] > 0 for r in rows["aux"])
    # step 1: the same weights and batch, so the same cross-entropy; the losses differ by COEF x aux, aux logged to 6
    # decimals (error <= 5e-7) and the sum rounded once in float32
    plain, aux = rows["plain"][0]["loss"], rows["aux"][0]
    bound = COEF * 5e-7 + 2 * FP32_U * abs(aux["loss"])
    assert abs(aux["loss"] - plain - COEF * aux["moe/aux_loss"]) <= bound, (aux, plain)


def test_a_dense_model_and_a_preference_stage_are_refused(tiny_qwen):
    cfg = load_config(None, {"model_name_or_path": str(tiny_qwen), "template": "qwen", "moe_aux_loss_coef": 0.01})
    with pytest.raises(ConfigError) as err:
        load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    assert str(err.value) == (
        f"moe_aux_loss_coef 0.01 weights the router loss of a mixture-of-experts model, and {tiny_qwen} (qwen2) is "
        f"dense (no experts): remove moe_aux_loss_coef."
    )
    with pytest.raises(ConfigError) as err:
        load_config(None, {"model_name_or_path": str(tiny_qwen), "stage": "dpo", "moe_aux_loss_coef": 0.01})
    assert (
        "moe_aux_loss_coef adds the router loss to the language-model loss of stages sft and pt; stage dpo computes "
        "its own loss without it: remove moe_aux_loss_coef."
    ) in str(err.value)
