"""GaLore, APOLLO, BAdam, Adam-mini and Muon as tunekit builds them (train/optimizers.py): one step equals the
library's own step on the same tensors, a short run learns, resume after a checkpoint gives the same weights,
the planner's optimizer-state bytes equal the tensors the real optimizer holds, and checkpoints load with
``weights_only=True``."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tests.optimizer_helpers import (
    backward,
    decay_names,
    optimizer_config,
    tiny_causal_lm,
    training_arguments,
    weights_of,
)
from tunekit.config import load_config
from tunekit.train.optimizers import build_optimizer, muon_params, optimizer_state_tensors, projected_params

METHODS = {
    "galore": dict(use_galore=True, galore_rank=4, galore_update_interval=2),
    "galore_layerwise": dict(use_galore=True, galore_rank=4, galore_update_interval=2, galore_layerwise=True),
    "apollo": dict(use_apollo=True, apollo_rank=4, apollo_update_interval=2),
    "badam": dict(use_badam=True, badam_switch_interval=2),
    "adam_mini": dict(use_adam_mini=True),
    "muon": dict(use_muon=True),
}


def _ours(arch, method):
    cfg = optimizer_config(**METHODS[method])
    model = tiny_causal_lm(arch)
    opt = build_optimizer(cfg, training_arguments(cfg), model, decay_names(model))
    return cfg, model, opt


def _two_steps(model, opt):
    for seed in (1, 2):
        backward(model, seed)
        opt.step()
        opt.zero_grad()


# ---------------------------------------------------------------- one step = the library's step
def _reference(method, model, cfg):
    """The optimizer as each package's README builds it, from the same parameter split."""
    decay = set(decay_names(model))
    kw = dict(lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon)

    def groups(params):
        ids = {id(p) for p in params}
        named = [(n, p) for n, p in model.named_parameters() if id(p) in ids]
        return [
            dict(params=[p for n, p in named if n not in decay], weight_decay=0.0),
            dict(params=[p for n, p in named if n in decay], weight_decay=cfg.weight_decay),
        ]

    if method in ("galore", "apollo"):
        proj = projected_params(model, "all")
        ids = {id(p) for p in proj}
        rest = [p for p in model.parameters() if id(p) not in ids]
        if method == "galore":
            from galore_torch import GaLoreAdamW

            extra = dict(rank=4, update_proj_gap=2, scale=cfg.galore_scale, proj_type="std")
            return GaLoreAdamW(groups(rest) + [dict(params=proj, weight_decay=cfg.weight_decay, **extra)], **kw)
        from apollo_torch import APOLLOAdamW

        extra = dict(
            rank=4, proj="random", proj_type="std", update_proj_gap=2, scale=cfg.apollo_scale, scale_type="channel"
        )
        return APOLLOAdamW(groups(rest) + [dict(params=proj, weight_decay=cfg.weight_decay, **extra)], **kw)
    if method == "adam_mini":
        from adam_mini import Adam_mini

        c = model.config
        return Adam_mini(
            named_parameters=model.named_parameters(),
            weight_decay=cfg.weight_decay,
            dim=c.hidden_size,
            n_heads=c.num_attention_heads,
            n_kv_heads=c.num_key_value_heads,
            verbose=False,
            **kw,
        )
    if method == "badam":
        from badam import BlockOptimizer

        return BlockOptimizer(
            base_optimizer=torch.optim.AdamW([g for g in groups(list(model.parameters())) if g["params"]], **kw),
            named_parameters_list=list(model.named_parameters()),
            switch_block_every=2,
            switch_mode="ascending",
            verbose=0,
        )
    raise AssertionError(method)


class _Both:
    """Muon's reference: torch.optim.Muon and torch.optim.AdamW stepped side by side."""

    def __init__(self, *opts):
        self.opts = opts

    def step(self):
        for o in self.opts:
            o.step()

    def zero_grad(self):
        for o in self.opts:
            o.zero_grad()


def _muon_reference(model, cfg):
    muon, adamw = muon_params(model)
    decay = set(decay_names(model))
    name = {id(p): n for n, p in model.named_parameters()}

    def groups(params):
        return [
            g
            for g in (
                dict(params=[p for p in params if name[id(p)] not in decay], weight_decay=0.0),
                dict(params=[p for p in params if name[id(p)] in decay], weight_decay=cfg.weight_decay),
            )
            if g["params"]
        ]

    return _Both(
        torch.optim.Muon(
            groups(muon),
            lr=cfg.learning_rate,
            momentum=0.95,
            nesterov=True,
            ns_steps=5,
            adjust_lr_fn="match_rms_adamw",
        ),
        torch.optim.AdamW(
            groups(adamw), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon
        ),
    )


@pytest.mark.parametrize("method", ["galore", "apollo", "badam", "adam_mini", "muon"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_steps_equal_the_library_step(arch, method):
    """Two steps (GaLore/APOLLO recompute the projection at step 2, BAdam switches block after step 1), bit for bit."""
    cfg, model, opt = _ours(arch, method)
    _two_steps(model, opt)
    ref_model = tiny_causal_lm(arch)
    ref = _muon_reference(ref_model, cfg) if method == "muon" else _reference(method, ref_model, cfg)
    _two_steps(ref_model, ref)
    ours, theirs = weights_of(model), weights_of(ref_model)
    assert ours.keys() == theirs.keys()
    changed = [n for n in ours if not torch.equal(ours[n], weights_of(tiny_causal_lm(arch))[n])]
    assert changed  # the steps did something
    for n in ours:
        assert torch.equal(ours[n], theirs[n]), n


@pytest.mark.parametrize("method", ["galore", "apollo"])
def test_layerwise_equals_the_whole_model_step(method):
    """Per-parameter optimizers stepped by the gradient hooks = one optimizer over all parameters (no clipping)."""
    whole_cfg, whole, whole_opt = _ours("llama", method)
    cfg = optimizer_config(**{**METHODS[method], f"{method}_layerwise": True})
    layer = tiny_causal_lm("llama")
    layer_opt = build_optimizer(cfg, training_arguments(cfg), layer, decay_names(layer))
    _two_steps(whole, whole_opt)
    for seed in (1, 2):
        backward(layer, seed)  # the hooks step and free each gradient
        assert all(p.grad is None for p in layer.parameters())
        layer_opt.step()
    a, b = weights_of(whole), weights_of(layer)
    for n in a:
        assert torch.equal(a[n], b[n]), n


# ---------------------------------------------------------------- the planner's state bytes
def _storage_bytes(tensors) -> int:
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


@pytest.mark.parametrize("method", ["galore", "apollo", "badam", "adam_mini", "muon"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_planner_optimizer_state_bytes_are_exact(arch, method, tmp_path):
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import resolve_setup

    cfg = optimizer_config(
        **{**METHODS[method], "badam_switch_interval": 50} if method == "badam" else METHODS[method]
    )  # BAdam
    model = tiny_causal_lm(
        arch
    )  # clears its state when it switches blocks (after step 1 with interval 2): count before that
    opt = build_optimizer(cfg, training_arguments(cfg), model, decay_names(model))
    backward(model)
    opt.step()
    held = optimizer_state_tensors(opt)
    if method == "badam":  # BAdam's fp32 copy of the active block exists only for the optimizer (param_idx2hp)
        held += list(opt.param_idx2hp.values())
    model.config.save_pretrained(tmp_path / arch)
    est = estimate_memory(load_shape(str(tmp_path / arch), None), resolve_setup(cfg)).components
    assert est["optimizer_states"] == _storage_bytes(held)
    adamw = 8 * sum(p.numel() for p in model.parameters())
    assert est["optimizer_states"] < adamw  # each one holds less than AdamW's two fp32 moments


# ---------------------------------------------------------------- through tunekit train
@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    data = tmp_path_factory.mktemp("opt-data")
    write_dataset(data, "toy", alpaca_records(16))
    return data


@pytest.mark.parametrize("method", list(METHODS))
def test_short_run_learns(method, tiny_qwen, toy, tmp_path):
    from tunekit.flow import run_train

    out = tmp_path / method
    run_train(
        load_config(None, base_config(tiny_qwen, toy, out, finetuning_type="full", max_steps=6, **METHODS[method]))
    )
    losses = logged_losses(out)
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.3, losses


@pytest.mark.parametrize("method", ["galore", "galore_layerwise", "badam", "muon"])
def test_resume_after_a_checkpoint_gives_the_same_weights(method, tiny_qwen, toy, tmp_path):
    """Train 4 steps saving at step 2; copy checkpoint-2 into a fresh folder (what a killed run leaves) and resume:
    the final weights are bit-identical. Step 2 lies inside the state that is unusual: GaLore recomputes its
    projection there (interval 2), BAdam trains its second block (it switched after step 1)."""
    from safetensors.torch import load_file

    from tunekit.flow import run_train

    opts = dict(finetuning_type="full", max_steps=4, save_strategy="steps", save_steps=2, **METHODS[method])
    full = tmp_path / "full"
    run_train(load_config(None, base_config(tiny_qwen, toy, full, **opts)))
    assert torch.load(full / "checkpoint-2" / "optimizer.pt", weights_only=True)  # no pickled objects in the state
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    run_train(load_config(None, base_config(tiny_qwen, toy, resumed, resume_from_checkpoint=True, **opts)))
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert logged_losses(full)[2:] == logged_losses(resumed)[-2:]


def test_badam_state_dict_restores_the_active_block():
    cfg, model, opt = _ours("llama", "badam")
    for seed in (1, 2, 3):  # switch after step 1 and step 3: block 1 is active at step 2..3
        backward(model, seed)
        opt.step()
        opt.zero_grad()
    saved = opt.state_dict()
    assert saved["badam"]["active_block_idx"] == 0 and saved["badam"]["global_step"] == 3  # ascending, wrapped round
    cfg2, model2, fresh = _ours("llama", "badam")
    fresh.load_state_dict(saved)
    assert (fresh.active_block_idx, fresh.global_step, fresh.current_block_idx) == (0, 3, 1)
    trainable = sorted(n for n, p in model2.named_parameters() if p.requires_grad)
    assert trainable and all(n.startswith("model.layers.0.") for n in trainable)


def test_targets_are_module_path_parts_as_in_llamafactory_examples(tmp_path):
    """galore_target: mlp,self_attn (LLaMA-Factory's GaLore example) = every linear of the layers;
    a wrong name is named."""
    from tunekit.errors import ConfigError
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import resolve_setup

    model = tiny_causal_lm("llama", tmp_path)
    assert [id(p) for p in projected_params(model, "mlp,self_attn")] == [id(p) for p in projected_params(model, "all")]
    assert len(projected_params(model, "q_proj,down_proj")) == 2 * 2  # two layers
    with pytest.raises(
        ConfigError,
        match=r"the target modules attn are not linear layers .* linear layers: down_proj, gate_proj, k_proj, o_proj, "
        r"q_proj, up_proj, v_proj",
    ):
        projected_params(model, "attn")
    shape = load_shape(str(tmp_path / "llama"), None)
    planned = {
        t: estimate_memory(
            shape, resolve_setup(optimizer_config(use_galore=True, galore_rank=4, galore_target=t))
        ).components["optimizer_states"]
        for t in ("all", "mlp,self_attn", "q_proj")
    }
    assert planned["all"] == planned["mlp,self_attn"] < planned["q_proj"]  # fewer projected weights: more full moments
