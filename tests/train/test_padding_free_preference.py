"""Padding-free batches for dpo (every pref_loss), kto and rm: one row per micro-batch, no pad token, restarting
position ids, per-sequence log-probs / scores gathered by ``cu_seqlens`` (``train/batching.py``).

Everything runs in float64 (``dtype: float64``) so that the two layouts can be compared tightly. Why the bounds:

* Padded and padding-free batches run the same arithmetic on each sequence; only reduction orders differ (matmul
  blocking over other shapes, attention over another key length, ``index_add`` instead of a row sum). Every value of
  the forward is a sum of at most ``K = max(hidden, intermediate, vocab, tokens in the batch)`` products, and two
  orders of such a sum differ by at most ``2 K u`` relative (Higham eq. 4.4, ``tests/tolerances.sum_order_bound``).
  Through the ``D`` sums on the way from the embeddings to a loss (per layer: q/k/v, attention scores, attention
  output, o-proj, gate/up, down, two norms; then the LM head and the log-softmax), with the tiny model's O(1)
  conditioning, a loss or a log-prob sum moves by at most ``D * 2 K u`` relative to its magnitude — ``rel_bound``
  below, ~1e-11 for the tiny model. A gradient element is compared relative to the largest gradient element of the
  model: elements that cancel have no relative accuracy of their own (the reward model's bias gets ``Σ (∂L/∂r_w +
  ∂L/∂r_l) = 0`` up to rounding); the backward pass doubles ``D``.
* The logged metrics pass through float32 (``StageTrainer.store_metrics``): one float32 rounding each, so they agree
  to ``2 * FP32_U`` relative on top of the float64 bound.
* Weights trained a few steps: ``FLOAT64_WEIGHT_TOL`` (``tests/tolerances.py``). The reward model's bias is the one
  element whose gradient is rounding noise (~1e-16, see above); Adam's ``eps`` = 1e-8 caps the step that noise drives
  at ``lr * 1e-16 / eps`` ~ 1e-10, still below the bound.

Measured (tiny Qwen2, 6 pairs / examples, bounds ~1e-11 / 2e-11): loss 0 to 1.5e-15 relative and gradients 3.5e-16
to 7.5e-16 of the largest element, for each dpo loss, kto and rm; weights after 3 steps 3.6e-16 (dpo), 1.0e-15 (kto),
4.1e-12 (rm, the bias above).

What the bounds guard: a token attending across a sequence, a label shifted onto the next sequence's first token, the
reference computed on the wrong sequence, or a score read at the wrong position all move these values by >= 1e-3.
"""

from __future__ import annotations

import random

import pytest
import torch

from tests.helpers import base_config, write_dataset
from tests.stage_helpers import KTO_ENTRY, PREF_COLUMNS, WORDS
from tests.tolerances import FLOAT64_WEIGHT_TOL, FP32_U, FP64_U
from tunekit.config import load_config
from tunekit.train.batching import (
    KTOCollator,
    PaddingFreeKTOCollator,
    PaddingFreePairCollator,
    PairCollator,
    segment_of_tokens,
)

LOSSES = [
    ("sigmoid", {}),
    ("sigmoid", {"dpo_label_smoothing": 0.1, "pref_ftx": 0.5}),
    ("hinge", {}),
    ("ipo", {}),
    ("orpo", {}),
    ("simpo", {"pref_beta": 2.0}),
]


def _words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Pairs and KTO examples of very different lengths (1 to 14 words), so padded batches carry much padding."""
    folder = tmp_path_factory.mktemp("pfdata")
    rng = random.Random(3)
    pairs = [
        {
            "instruction": "Describe " + _words(rng, 1, 6),
            "input": "",
            "chosen": _words(rng, 1, 14) + " 7 7",
            "rejected": _words(rng, 1, 14) + " 3 3",
        }
        for _ in range(16)
    ]
    write_dataset(folder, "pairs", pairs, {"ranking": True, "columns": PREF_COLUMNS})
    kto = [
        {
            "messages": [
                {"role": "user", "content": "Describe " + _words(rng, 1, 6)},
                {"role": "assistant", "content": _words(rng, 1, 14) + (" 7 7" if i % 2 == 0 else " 3 3")},
            ],
            "label": i % 2 == 0,
        }
        for i in range(16)
    ]
    write_dataset(folder, "kto", kto, KTO_ENTRY)
    return folder


def _cfg(model, data_dir, out, stage, **overrides):
    dataset = "kto" if stage == "kto" else "pairs"
    return load_config(
        None,
        base_config(
            model,
            data_dir,
            out,
            stage=stage,
            dataset=dataset,
            dtype="float64",
            gradient_checkpointing=False,
            **overrides,
        ),
    )


def _build(cfg):
    """The trainer run_train builds, and its training data."""
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import dpo, kto, rm

    module = {"dpo": dpo, "kto": kto, "rm": rm}[cfg.stage]
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, cfg.stage)
    model = module.load_model(cfg, tokenizer) if cfg.stage == "rm" else load_model(cfg, tokenizer)
    trainer = module.build_trainer(cfg, build_training_arguments(cfg, []), model, tokenizer, data, [])
    return trainer, data


def _move_off_the_reference(model, seed=0):
    """Random LoRA B (zero at the start) and value head, so policy and reference differ and rewards are not 0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "v_head" in name:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.05)


def _rel_bound(model, tokens: int, backward: bool = False) -> float:
    """``D * 2 K u`` (module doc): the relative distance two reduction orders can put between the two layouts."""
    c = model.config
    k = max(c.hidden_size, c.intermediate_size, c.vocab_size, tokens)
    depth = 10 * c.num_hidden_layers + 3
    return (2 if backward else 1) * depth * 2 * k * FP64_U


def _loss_grads_metrics(trainer, batch):
    model = trainer.model
    model.zero_grad(set_to_none=True)
    trainer._metrics["train"].clear()
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return loss.detach(), grads, metrics


def _assert_same(trainer, padded, packed, tokens):
    model = trainer.model.train()
    loss_a, grads_a, metrics_a = _loss_grads_metrics(trainer, padded)
    loss_b, grads_b, metrics_b = _loss_grads_metrics(trainer, packed)
    rel, rel_grad = _rel_bound(model, tokens), _rel_bound(model, tokens, backward=True)
    assert loss_a.dtype == torch.float64
    assert abs(loss_a - loss_b).item() <= rel * abs(loss_a).item() + 1e-300, (loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and grads_a
    scale = max(g.abs().max().item() for g in grads_a.values())
    assert scale > 1e-6  # the comparison is not vacuous
    for name, g in grads_a.items():
        assert (g - grads_b[name]).abs().max().item() <= rel_grad * scale, name
    assert metrics_a.keys() == metrics_b.keys()
    for key, value in metrics_a.items():
        assert metrics_b[key] == pytest.approx(value, rel=rel + 2 * FP32_U, abs=1e-300), key
    return metrics_a


# ---- the batch layout -----------------------------------------------------------------------------------------------
PAIRS = [
    {
        "chosen_input_ids": [11, 12, 13],
        "chosen_labels": [-100, 12, 13],
        "rejected_input_ids": [11, 12, 14, 15],
        "rejected_labels": [-100, 12, 14, 15],
    },
    {
        "chosen_input_ids": [21, 22],
        "chosen_labels": [-100, 22],
        "rejected_input_ids": [21, 23, 24],
        "rejected_labels": [21, 23, 24],
    },
]


def test_pair_collator_puts_both_answers_of_every_pair_in_one_row_without_padding():
    batch = PaddingFreePairCollator()(PAIRS)
    assert set(batch) == {
        "input_ids",
        "position_ids",
        "cu_seqlens",
        "token_labels",
    }  # no attention_mask: see batching.py
    assert batch["input_ids"].tolist() == [[11, 12, 13, 21, 22, 11, 12, 14, 15, 21, 23, 24]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 1, 2]]
    assert batch["cu_seqlens"].tolist() == [0, 3, 5, 9, 12]  # chosen 0, chosen 1, rejected 0, rejected 1
    # each sequence's first label is -100, also where the record had a real label there (21 of rejected 1)
    assert batch["token_labels"].tolist() == [[-100, 12, 13, -100, 22, -100, 12, 14, 15, -100, 23, 24]]
    padded = PairCollator(pad_token_id=0, pad_to_multiple_of=8)(PAIRS)
    assert padded["input_ids"].numel() == 32 and batch["input_ids"].numel() == 12  # 20 of 32 padded slots were pads
    with_ref = [dict(p, ref_chosen_logps=-1.5 - i, ref_rejected_logps=-2.5 - i) for i, p in enumerate(PAIRS)]
    assert PaddingFreePairCollator()(with_ref)["ref_logps"].tolist() == [-1.5, -2.5, -2.5, -3.5]


def test_kto_collator_packs_the_examples_and_their_mismatched_pairs_in_two_rows():
    features = [
        {"input_ids": [1, 2, 3], "labels": [-100, 2, 3], "prompt_ids": [1], "response_ids": [2, 3], "kto_tag": True},
        {
            "input_ids": [4, 5, 6, 7],
            "labels": [-100, -100, 6, 7],
            "prompt_ids": [4, 5],
            "response_ids": [6, 7],
            "kto_tag": False,
        },
    ]
    batch = PaddingFreeKTOCollator()(features)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7]] and batch["cu_seqlens"].tolist() == [0, 3, 7]
    assert batch["token_labels"].tolist() == [[-100, 2, 3, -100, -100, 6, 7]]
    assert batch["kl_input_ids"].tolist() == [[1, 6, 7, 4, 5, 2, 3]]  # prompt i + answer of i+1
    assert batch["kl_position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3]]
    assert batch["kl_token_labels"].tolist() == [[-100, 6, 7, -100, -100, 2, 3]]
    assert batch["desirable"].tolist() == [True, False]
    padded = KTOCollator(pad_token_id=0)(features)
    assert padded["kl_input_ids"][0, :3].tolist() == batch["kl_input_ids"][0, :3].tolist()


def test_no_token_attends_across_a_sequence_boundary(tiny_qwen):
    """The mask transformers builds from the restarting positions is block-diagonal causal, FlashAttention-2 would get
    our cu_seqlens, and changing one sequence's tokens leaves every other sequence's logits bit for bit unchanged."""
    from transformers import AutoModelForCausalLM
    from transformers.masking_utils import create_causal_mask, find_packed_sequence_indices
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    batch = PaddingFreePairCollator()(PAIRS)
    cu, pos = batch["cu_seqlens"], batch["position_ids"]
    owner = segment_of_tokens(cu)
    assert owner.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3]
    assert find_packed_sequence_indices(pos)[0].tolist() == owner.tolist()
    (cu_q, cu_k), _ = prepare_fa_kwargs_from_position_ids(pos)
    assert cu_q.tolist() == cu_k.tolist() == cu.tolist()
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float64, attn_implementation="sdpa").eval()
    t = pos.shape[1]
    embeds = torch.zeros(1, t, model.config.hidden_size, dtype=torch.float64)
    mask = create_causal_mask(
        config=model.config, inputs_embeds=embeds, attention_mask=None, cache=None, position_ids=pos
    )
    allowed = mask[0, 0] if mask.dtype == torch.bool else mask[0, 0] == 0
    q, k = torch.arange(t)[:, None], torch.arange(t)[None, :]
    assert torch.equal(allowed, (owner[:, None] == owner[None, :]) & (k <= q))
    with torch.no_grad():
        base = model(
            input_ids=batch["input_ids"], position_ids=pos, use_cache=False
        ).logits  # a cache disables the packed mask
        changed = batch["input_ids"].clone()
        changed[0, 5:9] = torch.tensor([40, 41, 42, 43])  # rejected 0 only
        other = model(input_ids=changed, position_ids=pos, use_cache=False).logits
    outside = owner != 2
    # masked keys get softmax weight exactly 0 and the remaining sums run in the same order: no rounding difference
    assert torch.equal(base[0, outside], other[0, outside])
    assert (base[0, ~outside] - other[0, ~outside]).abs().max() > 1e-3
    with torch.no_grad():  # and each sequence's logits are those it gets alone
        for s in range(4):
            ids = batch["input_ids"][:, cu[s] : cu[s + 1]]
            alone = model(input_ids=ids).logits
            assert (alone[0] - base[0, cu[s] : cu[s + 1]]).abs().max() <= _rel_bound(model, t) * alone.abs().max()


# ---- equivalence of one micro-batch ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dpo_lora(tiny_qwen, data_dir, tmp_path_factory):
    cfg = _cfg(tiny_qwen, data_dir, tmp_path_factory.mktemp("dpo"), "dpo")
    trainer, data = _build(cfg)
    _move_off_the_reference(trainer.model)
    features = [data.train[i] for i in range(6)]
    return cfg, trainer, features


@pytest.mark.parametrize("kind, extra", LOSSES, ids=[k + ("+" + "+".join(e) if e else "") for k, e in LOSSES])
def test_dpo_loss_metrics_and_gradients_match_the_padded_batch(dpo_lora, kind, extra):
    cfg, trainer, features = dpo_lora
    trainer.tunekit_config = cfg.model_copy(update={"pref_loss": kind, **extra})
    padded, packed = trainer.data_collator(features), PaddingFreePairCollator()(features)
    assert "attention_mask" in padded and (padded["attention_mask"] == 0).any()  # the padded batch has padding
    tokens = int(packed["cu_seqlens"][-1])
    assert tokens == int(padded["attention_mask"].sum())
    metrics = _assert_same(trainer, padded, packed, tokens)
    assert abs(metrics["rewards/margins"]) > 1e-4  # policy and reference differ: the rewards are not trivially 0
    if extra.get("pref_ftx"):
        assert "loss/sft" in metrics


def test_tokens_seen_count_the_same_real_tokens_in_both_layouts(dpo_lora):
    _, trainer, features = dpo_lora
    padded, packed = trainer.data_collator(features), PaddingFreePairCollator()(features)
    old = trainer.args.include_num_input_tokens_seen
    trainer.args.include_num_input_tokens_seen, trainer.state.num_input_tokens_seen = "non_padding", 0
    try:
        trainer._track_num_input_tokens(padded)
        seen_padded = trainer.state.num_input_tokens_seen
        trainer._track_num_input_tokens(packed)
    finally:
        trainer.args.include_num_input_tokens_seen = old
    assert seen_padded == int(padded["attention_mask"].sum()) == packed["input_ids"].numel()
    assert trainer.state.num_input_tokens_seen == 2 * seen_padded


def test_dpo_with_gemma3_refuses_padding_free(tiny_qwen, data_dir, tmp_path):
    """Images in padding-free dpo rows are tested in tests/multimodal/test_padding_free_media.py;
    Gemma 3 is refused by name."""
    import types

    from tunekit.errors import ConfigError
    from tunekit.train.stages.dpo import pair_collator

    cfg = _cfg(tiny_qwen, data_dir, tmp_path / "o", "dpo", padding_free=True)
    with pytest.raises(
        ConfigError, match="padding_free is not supported for the gemma3 family: transformers 5.24 builds"
    ):
        pair_collator(
            cfg, tokenizer=None, mm=types.SimpleNamespace(NAME="gemma3")
        )  # refused before the plugin is used


def test_dpo_with_a_separate_reference_model_matches_the_padded_batch(tiny_qwen, data_dir, tmp_path):
    cfg = _cfg(tiny_qwen, data_dir, tmp_path / "o", "dpo", finetuning_type="full")
    trainer, data = _build(cfg)
    assert trainer.ref_model is not None  # full fine-tuning: a frozen copy is the reference
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.02)
    features = [data.train[i] for i in range(4)]
    packed = PaddingFreePairCollator()(features)
    metrics = _assert_same(trainer, trainer.data_collator(features), packed, int(packed["cu_seqlens"][-1]))
    assert abs(metrics["rewards/margins"]) > 1e-4


def test_precomputed_reference_log_probs_are_per_sample_those_of_the_padded_path(
    dpo_lora, tiny_qwen, data_dir, tmp_path
):
    from tunekit.train.stages import dpo, kto

    cfg, trainer, features = dpo_lora
    train = trainer.train_dataset.select(range(6))
    # batch size 4: the last batch holds 2 pairs, so batch boundaries differ from the training batches
    a = dpo.precompute_reference(train, trainer.data_collator, trainer.model, trainer.ref_model, 4)
    b = dpo.precompute_reference(train, PaddingFreePairCollator(), trainer.model, trainer.ref_model, 4)
    tol = _rel_bound(trainer.model, 4 * 2 * cfg.cutoff_len)
    for column in ("ref_chosen_logps", "ref_rejected_logps"):
        for x, y in zip(a[column], b[column]):
            assert y == pytest.approx(x, rel=tol) and x < -1.0, column
    kcfg = _cfg(tiny_qwen, data_dir, tmp_path / "k", "kto")
    ktrainer, _ = _build(kcfg)
    ktrain = ktrainer.train_dataset.select(range(6))
    ka = kto.precompute_reference(ktrain, ktrainer.data_collator, ktrainer.model, ktrainer.ref_model, 4)
    kb = kto.precompute_reference(ktrain, PaddingFreeKTOCollator(), ktrainer.model, ktrainer.ref_model, 4)
    for column in ("ref_logps", "ref_kl_logps"):
        assert kb[column] == pytest.approx(ka[column], rel=tol), column
    # and a micro-batch that carries them gives the same loss in both layouts
    trainer.tunekit_config = cfg.model_copy(update={"pref_loss": "sigmoid"})
    rows = [a[i] for i in range(4)]
    packed = PaddingFreePairCollator()(rows)
    assert "ref_logps" in packed
    _assert_same(trainer, trainer.data_collator(rows), packed, int(packed["cu_seqlens"][-1]))


def test_kto_loss_metrics_and_gradients_match_the_padded_batch(tiny_qwen, data_dir, tmp_path):
    cfg = _cfg(tiny_qwen, data_dir, tmp_path / "o", "kto", pref_ftx=0.3)
    trainer, data = _build(cfg)
    _move_off_the_reference(trainer.model)
    features = [trainer.train_dataset[i] for i in range(6)]
    padded, packed = trainer.data_collator(features), PaddingFreeKTOCollator()(features)
    assert (padded["kl_attention_mask"] == 0).any()
    metrics = _assert_same(trainer, padded, packed, int(packed["cu_seqlens"][-1]))
    assert {"kto/kl", "rewards/chosen", "rewards/rejected", "rewards/margins"} <= set(metrics)
    assert metrics["kto/kl"] != 0.0


def test_rm_loss_scores_and_gradients_match_the_padded_batch(tiny_qwen, data_dir, tmp_path):
    cfg = _cfg(tiny_qwen, data_dir, tmp_path / "o", "rm")
    trainer, data = _build(cfg)
    _move_off_the_reference(trainer.model)
    features = [data.train[i] for i in range(6)]
    padded, packed = trainer.data_collator(features), PaddingFreePairCollator()(features)
    assert (padded["attention_mask"] == 0).any()
    trainer.model.train()
    with torch.no_grad():
        _, out_a = trainer.compute_loss(trainer.model, padded, return_outputs=True)
        _, out_b = trainer.compute_loss(trainer.model, packed, return_outputs=True)
    tol = _rel_bound(trainer.model, int(packed["cu_seqlens"][-1]))
    for key in ("chosen", "rejected"):
        scale = out_a[key].abs().max().item()
        assert scale > 1e-4 and (out_a[key] - out_b[key]).abs().max().item() <= tol * scale, key
    metrics = _assert_same(trainer, padded, packed, int(packed["cu_seqlens"][-1]))
    assert {"accuracy", "rewards/margins"} <= set(metrics)


# ---- config and short runs ------------------------------------------------------------------------------------------
def test_the_stage_builds_the_padding_free_collator_and_other_stages_refuse_it(tiny_qwen, data_dir, tmp_path):
    from tunekit.errors import ConfigError

    for stage, kind in (
        ("dpo", PaddingFreePairCollator),
        ("rm", PaddingFreePairCollator),
        ("kto", PaddingFreeKTOCollator),
    ):
        trainer, _ = _build(_cfg(tiny_qwen, data_dir, tmp_path / stage, stage, padding_free=True))
        assert isinstance(trainer.data_collator, kind), stage
    with pytest.raises(ConfigError) as err:
        load_config(
            None,
            base_config(
                tiny_qwen, data_dir, tmp_path / "p", stage="ppo", padding_free=True, reward_model=str(tiny_qwen)
            ),
        )
    assert "padding_free is not supported for stage ppo: remove padding_free (it is only for" in str(err.value)


def _final_weights(out):
    from safetensors.torch import load_file

    weights = load_file(out / "adapter_model.safetensors")
    head = out / "value_head.safetensors"
    return {**weights, **(load_file(head) if head.is_file() else {})}


@pytest.mark.parametrize(
    "stage, extra",
    [
        ("dpo", {"pref_loss": "sigmoid", "pref_ftx": 0.2}),
        ("dpo", {"precompute_ref_log_probs": True}),
        ("kto", {}),
        ("rm", {}),
    ],
)
def test_a_short_padding_free_run_trains_to_the_padded_runs_weights(tiny_qwen, data_dir, tmp_path, stage, extra):
    from tests.helpers import train_rows
    from tunekit.flow import run_train

    common = dict(max_steps=3, learning_rate=1e-2, per_device_train_batch_size=3, **extra)
    a, b = tmp_path / "padded", tmp_path / "free"
    run_train(_cfg(tiny_qwen, data_dir, a, stage, **common))
    run_train(_cfg(tiny_qwen, data_dir, b, stage, padding_free=True, **common))
    wa, wb = _final_weights(a), _final_weights(b)
    assert wa.keys() == wb.keys() and wa
    # LoRA B starts at zero, so its size is how far training moved it: matching the weights means something
    assert max(w.abs().max().item() for k, w in wa.items() if "lora_B" in k) > 1e-3
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) <= FLOAT64_WEIGHT_TOL
    la, lb = ([r["loss"] for r in train_rows(p)] for p in (a, b))
    assert len(la) == 3 and lb == pytest.approx(la, rel=2 * FP32_U)  # the Trainer logs the loss through float32
