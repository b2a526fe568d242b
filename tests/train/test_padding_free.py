"""``padding_free`` and ``max_tokens_per_batch`` (sft, pt): one row per micro-batch, batches by token count.

The padding-free row of a micro-batch must give every sample exactly the logits, loss and gradients the padded
batch gives it (tiny Qwen2 in float64, sdpa and eager), the mask transformers derives from the restarting
position ids must never let a token see another sample, and a run with a token budget must take exactly the
steps ``tunekit plan`` plans. Each comparison is paired with a variant that must differ (the plain concatenation
without restarting positions), so the tests can fail.
"""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import base_config, log_rows, write_dataset
from tests.tolerances import FP32_U, FP64_U, loss_tolerance, sum_order_bound
from tunekit.config import load_config
from tunekit.data.collator import PaddingCollator
from tunekit.data.padding_free import PaddingFreeCollator, concatenate, segment_ids
from tunekit.errors import ConfigError
from tunekit.train.token_budget import TokenBudgetBatchSampler, batch_cost, budget_batches

# float64 forwards of the same samples, padded vs concatenated: they differ only in matmul blocking and in the mask's
# shape, so each logit (|logit| < 10 through 2 layers of width 64) carries a relative error of at most a few times
# 64 * 2**-53 per layer (~1e-13 in all); 1e-10 leaves a thousandfold margin and is eight orders below the effect
# guarded (a token attending across a sample boundary moves its logits by > 1e-3, asserted below).
LOGIT_TOL = 1e-10


def _words(n: int, seed: int) -> str:
    import random

    rng = random.Random(seed)
    return " ".join(
        rng.choice(["alpha", "beta", "gamma", "delta", "one", "two", "seven", "tokens", "padding"]) for _ in range(n)
    )


def varied_records(n: int, seed: int = 0) -> list[dict]:
    """Alpaca records whose lengths vary widely (3 to ~60 words), so padded batches carry real padding."""
    import random

    rng = random.Random(seed)
    return [
        {
            "instruction": _words(rng.randint(2, 30), seed * 1000 + i),
            "input": "",
            "output": _words(rng.randint(1, 30), seed * 1000 + i + 500),
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def samples(tiny_qwen, tmp_path_factory):
    """Tokenized sft samples (train_on_prompt: every first label is a real token, so the boundary
    cut matters) and pt ones."""
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    folder = tmp_path_factory.mktemp("pf")
    write_dataset(folder, "toy", varied_records(6, seed=3))
    cfg = load_config(None, base_config(tiny_qwen, folder, folder / "o", cutoff_len=128, train_on_prompt=True))
    tok = load_tokenizer(cfg)
    sft = prepare_datasets(cfg, tok, "sft").train
    rows = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in sft]
    pt = [{"input_ids": r["input_ids"], "labels": list(r["input_ids"])} for r in rows]  # pt: every token trained
    return tok, rows, pt


def _model(path, attn):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64, attn_implementation=attn)
    model.config.use_cache = False  # as in training: with a KV cache transformers does not look for packed positions
    return model


def test_collator_pins_one_row():
    batch = PaddingFreeCollator(pad_token_id=0)(
        [
            {"input_ids": [5, 6, 7], "labels": [5, 6, 7], "length": 3},
            {"input_ids": [8, 9], "labels": [-100, 9]},
            {"input_ids": [4], "labels": [4]},
        ]
    )
    assert set(batch) == {"input_ids", "position_ids", "labels"}  # no attention_mask: transformers derives the blocks
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 4]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, 9, -100]]
    assert segment_ids(batch["position_ids"]).tolist() == [[0, 0, 0, 1, 1, 2]]


def test_concatenate_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="sample 0: 1 labels for 2 tokens"):
        concatenate([[1, 2]], [[1]])


def test_mask_never_crosses_a_sample(tiny_qwen):
    """The 4-D mask transformers builds (sdpa) from our position ids: causal within a sample, nothing across."""
    from transformers import AutoConfig
    from transformers.masking_utils import create_causal_mask, find_packed_sequence_indices

    config = AutoConfig.from_pretrained(tiny_qwen)
    config._attn_implementation = "sdpa"
    lengths = [4, 1, 3, 2]
    batch = PaddingFreeCollator()([{"input_ids": [7] * n} for n in lengths])
    pos = batch["position_ids"]
    seg = [k for k, n in enumerate(lengths) for _ in range(n)]
    assert find_packed_sequence_indices(pos).tolist() == [seg]
    embeds = torch.zeros(1, pos.shape[1], config.hidden_size)
    mask = create_causal_mask(config=config, inputs_embeds=embeds, attention_mask=None, cache=None, position_ids=pos)
    expected = torch.tensor([[seg[i] == seg[j] and j <= i for j in range(len(seg))] for i in range(len(seg))])
    assert mask.shape == (1, 1, len(seg), len(seg)) and torch.equal(mask[0, 0], expected)


def _f64_loss(logits, labels):
    """Token cross-entropy in float64 (HF's loss casts logits to float32): sum over trained positions / their count."""
    targets = F.pad(labels[:, 1:], (0, 1), value=-100)
    keep = targets != -100
    return F.cross_entropy(logits[keep], targets[keep], reduction="sum") / keep.sum()


def _grads(model, batch):
    model.zero_grad()
    out = model(**{k: v for k, v in batch.items() if k != "labels"})
    loss = _f64_loss(out.logits, batch["labels"])
    loss.backward()
    return loss.detach(), out.logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("stage", ["sft", "pt"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_loss_logits_and_gradients_equal_the_padded_batch(samples, tiny_qwen, stage, attn):
    tok, sft, pt = samples
    feats = sft if stage == "sft" else pt
    model = _model(tiny_qwen, attn)
    padded = PaddingCollator(pad_token_id=tok.pad_token_id, pad_to_multiple_of=8)(feats)
    free = PaddingFreeCollator(pad_token_id=tok.pad_token_id)(feats)
    loss_p, logits_p, grads_p = _grads(model, padded)
    loss_f, logits_f, grads_f = _grads(model, free)
    # the same (hidden state, target) pairs are trained: the trainer's count over labels[..., 1:] matches exactly
    n = int((padded["labels"][:, 1:] != -100).sum())
    assert int((free["labels"][:, 1:] != -100).sum()) == n
    start = 0
    for row, f in enumerate(feats):  # every sample's logits, padded row vs its slice of the one row
        k = len(f["input_ids"])
        assert (logits_f[0, start : start + k] - logits_p[row, :k]).abs().max().item() <= LOGIT_TOL
        start += k
    # loss: each token's cross-entropy moves by at most 2 * max|d logit| (log-softmax is 2-Lipschitz in max-norm), and
    # the float64 mean over n tokens of two summation orders by loss_tolerance(n, loss, FP64_U)
    assert abs(loss_f.item() - loss_p.item()) <= 2 * LOGIT_TOL + loss_tolerance(n, loss_p.item(), FP64_U)
    # gradients: each element is a sum over the n trained tokens' paths of products through the widest contraction
    # of the backward pass (the vocabulary, 1,856 > the MLP's 256) and 2 layers, i.e. of at most m = n * V * 2 terms;
    # two summation orders differ by at most sum_order_bound(m, sum|terms|, FP64_U) = 2 m u sum|terms|. Taking
    # sum|terms| <= 1e3 x the tensor's largest gradient element (terms cancelling down to a thousandth of their
    # absolute sum) gives ~6e-7 of that element for m ~ 3e6: four orders under the > 1e-2 relative change the
    # cross-attending row makes (asserted below). Measured: ~4e-16.
    terms = n * max(model.config.vocab_size, model.config.intermediate_size) * 2
    for name, g in grads_p.items():
        scale = g.abs().max().item()
        bound = sum_order_bound(terms, scale * 1e3, FP64_U) + 1e-300
        assert (grads_f[name] - g).abs().max().item() <= bound, name
    # the guard: one plain row (positions continue, no block mask) makes later samples attend to earlier ones
    crossing = {"input_ids": free["input_ids"], "labels": free["labels"]}
    _, _, grads_x = _grads(model, crossing)
    worst = max(((grads_x[k] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item() for k, g in grads_p.items())
    assert worst > 1e-2


def test_trainer_loss_of_the_row_equals_the_padded_batch(samples, tiny_qwen, tmp_path):
    """TunekitTrainer.compute_loss (trained-token LM head, token-normalised) on the row vs the padded batch."""
    from tunekit.model.loader import load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.trainer import TunekitTrainer

    tok, sft, _ = samples
    cfg = load_config(None, base_config(tiny_qwen, tmp_path, tmp_path / "o", dtype="float64"))
    model = _model(tiny_qwen, "sdpa")
    trainer = TunekitTrainer(
        model=model, args=build_training_arguments(cfg, []), processing_class=load_tokenizer(cfg), tunekit_config=cfg
    )
    padded = PaddingCollator(pad_token_id=tok.pad_token_id)(sft)
    free = PaddingFreeCollator(pad_token_id=tok.pad_token_id)(sft)
    n = int((padded["labels"][:, 1:] != -100).sum())
    with torch.no_grad():
        lp = trainer.compute_loss(model, padded, num_items_in_batch=torch.tensor(n)).item()
        lf = trainer.compute_loss(model, free, num_items_in_batch=torch.tensor(n)).item()
    # tunekit's loss (like HF's) takes the cross-entropy in float32: two float32 sums of n terms
    assert abs(lf - lp) <= loss_tolerance(n, lp, FP32_U), (lf, lp)


# ---- token budget ---------------------------------------------------------------------------------------------------
def test_budget_batches_padded_sorted_and_within_budget():
    lengths = [10, 3, 7, 12, 5, 5, 2, 9]
    plan = budget_batches(lengths, 24, padding_free=False, pad_to=4)
    # longest first, widths rounded up to 4: {12, 10} = 2 x 12 = 24 (+9 would be 36); {9, 7} = 2 x 12;
    # {5, 5, 3} = 3 x 8 = 24 (+2 would be 4 x 8 = 32); {2}
    assert plan.batches == [[3, 0], [7, 2], [4, 5, 1], [6]]
    assert all(batch_cost([lengths[i] for i in b], False, 4) <= 24 for b in plan.batches)
    assert plan.oversized == []


def test_budget_batches_padding_free_counts_real_tokens_and_is_seeded():
    lengths = [10, 3, 7, 12, 5, 5, 2, 9, 30]
    a = budget_batches(lengths, 20, padding_free=True, seed=1)
    assert a.batches == budget_batches(lengths, 20, padding_free=True, seed=1).batches  # deterministic given the seed
    assert a.batches != budget_batches(lengths, 20, padding_free=True, seed=2).batches
    assert sorted(i for b in a.batches for i in b) == list(range(len(lengths)))  # every sample exactly once
    assert a.oversized == [8] and [8] in a.batches  # 30 > 20: its own batch, and said so
    assert all(sum(lengths[i] for i in b) <= 20 for b in a.batches if b != [8])


def test_budget_sampler_shuffles_batches_per_epoch_only():
    plan = budget_batches(list(range(1, 40)), 60, padding_free=True, seed=0)
    sampler = TokenBudgetBatchSampler(plan, seed=0)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert sorted(map(tuple, first)) == sorted(map(tuple, second)) == sorted(map(tuple, plan.batches))
    assert first != second and len(sampler) == len(plan.batches)
    assert not hasattr(sampler, "batch_size")  # accelerate: dynamic batches, dealt whole to the ranks


def test_trainer_hook_is_the_public_one():
    """transformers 5.24: a batch sampler reaches the DataLoader only through get_train_dataloader (public)."""
    from transformers import Trainer

    from tunekit.train.token_budget import TokenBudgetMixin
    from tunekit.train.trainer import TunekitTrainer

    assert callable(getattr(Trainer, "get_train_dataloader", None))
    assert TunekitTrainer.get_train_dataloader is TokenBudgetMixin.get_train_dataloader


def test_budget_run_takes_exactly_the_planned_steps(tiny_qwen, tmp_path, padding_free=False):
    """Padded token-budget batches (the padding-free ones: the resume test below, against the plan too)."""
    from tunekit.flow import run_train
    from tunekit.plan.planner import make_plan

    write_dataset(tmp_path / "d", "toy", varied_records(30, seed=7))
    out = tmp_path / "out"
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            tmp_path / "d",
            out,
            cutoff_len=96,
            max_steps=-1,
            num_train_epochs=2,
            gradient_accumulation_steps=2,
            max_tokens_per_batch=200,
            padding_free=padding_free,
            gradient_checkpointing=False,
        ),
    )
    plan = make_plan(cfg)
    by_samples = make_plan(cfg.model_copy(update={"max_tokens_per_batch": None})).total_steps
    run_train(cfg)
    logged = log_rows(out)
    assert {r["total_steps"] for r in logged} == {plan.total_steps}  # the Trainer's max_steps: the planned count
    assert max(r["step"] for r in logged) == plan.total_steps != by_samples, (plan.total_steps, by_samples)


def test_schema_rules():
    with pytest.raises(ConfigError, match="max_tokens_per_batch 100 is below cutoff_len 200: a sample of cutoff_len"):
        load_config(None, {"max_tokens_per_batch": 100, "cutoff_len": 200})
    with pytest.raises(ConfigError, match=r"padding_free and packing \(on by default for pt\) are two ways"):
        load_config(None, {"stage": "pt", "padding_free": True})
    with pytest.raises(ConfigError, match="padding_free and packing are two ways to remove padding: choose one"):
        load_config(None, {"padding_free": True, "packing": True})
    with pytest.raises(ConfigError, match="max_tokens_per_batch is for stages sft, pt, dpo and rm"):
        load_config(None, {"stage": "ppo", "max_tokens_per_batch": 4096})
    with pytest.raises(ConfigError, match="remove group_by_length"):
        load_config(None, {"max_tokens_per_batch": 4096, "group_by_length": True})
    load_config(None, {"stage": "pt", "packing": False, "padding_free": True, "max_tokens_per_batch": 4096})


def _loader(plan, seed=0):
    from torch.utils.data import DataLoader

    return DataLoader(
        list(range(sum(len(b) for b in plan.batches))),
        batch_sampler=TokenBudgetBatchSampler(plan, seed=seed),
        collate_fn=lambda rows: rows,
    )


def test_resume_skips_exactly_the_trained_batches():
    """The Trainer resumes mid-epoch with accelerate's skip_first_batches over the same (epoch-seeded) order."""
    from accelerate import skip_first_batches
    from accelerate.data_loader import DataLoaderShard

    plan = budget_batches([(7 * i) % 23 + 1 for i in range(40)], 48, padding_free=True, seed=3)
    full = DataLoaderShard(
        _loader(plan).dataset, batch_sampler=TokenBudgetBatchSampler(plan, seed=3), collate_fn=lambda r: r
    )
    full.set_epoch(1)
    order = list(full)
    resumed = DataLoaderShard(
        full.dataset, batch_sampler=TokenBudgetBatchSampler(plan, seed=3), collate_fn=lambda r: r
    )
    resumed.set_epoch(1)
    assert list(skip_first_batches(resumed, 5)) == order[5:]


def test_ranks_get_whole_batches_as_plan_steps_counts():
    """accelerate's BatchSamplerShard deals whole batches round-robin, cycling to even out:
    ceil(batches / world) each."""
    from accelerate.data_loader import BatchSamplerShard

    from tunekit.train.steps import plan_steps

    plan = budget_batches([(5 * i) % 17 + 2 for i in range(31)], 44, padding_free=True, seed=0)
    n = len(plan.batches)
    assert n % 2 == 1  # an odd count: rank 1 gets the first batch again
    sampler = TokenBudgetBatchSampler(plan, seed=0)
    order = list(sampler)
    ranks = [list(BatchSamplerShard(sampler, num_processes=2, process_index=r)) for r in (0, 1)]
    assert ranks[0] == order[0::2] and ranks[1] == order[1::2] + [order[0]]
    planned = plan_steps(31, 4, 2, world_size=2, num_train_epochs=1, num_batches=n)
    assert len(ranks[0]) == len(ranks[1]) == planned.micro_batches_per_device == -(-n // 2)


def test_budget_run_resumes_to_the_same_weights(tiny_qwen, tmp_path):
    """A token-budget run (2 epochs) resumed from its checkpoint-2: the same remaining batches, so
    the final weights equal the uninterrupted run's bit for bit (same machine, same operations)
    and the steps add up."""
    from safetensors.torch import load_file

    from tunekit.flow import run_train

    write_dataset(tmp_path / "d", "toy", varied_records(24, seed=8))
    opts = dict(
        cutoff_len=96,
        max_steps=-1,
        num_train_epochs=2,
        gradient_accumulation_steps=2,
        max_tokens_per_batch=200,
        padding_free=True,
        gradient_checkpointing=False,
        save_strategy="steps",
        save_steps=2,
    )
    full = tmp_path / "full"
    run_train(load_config(None, base_config(tiny_qwen, tmp_path / "d", full, **opts)))
    total = max(row["step"] for row in log_rows(full))
    from tunekit.plan.planner import make_plan

    assert make_plan(load_config(None, base_config(tiny_qwen, tmp_path / "d", full, **opts))).total_steps == total
    assert total > 4  # checkpoint-2 is mid-run (and, with 2 epochs, the resumed part crosses the epoch boundary)
    resumed = tmp_path / "resumed"  # the state of a run killed after its checkpoint-2: that checkpoint alone
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    run_train(
        load_config(
            None,
            base_config(
                tiny_qwen, tmp_path / "d", resumed, **opts, resume_from_checkpoint=str(resumed / "checkpoint-2")
            ),
        )
    )
    steps = [row["step"] for row in log_rows(resumed)]
    assert max(steps) == total and min(s for s in steps if s) == 3
    a, b = load_file(full / "adapter_model.safetensors"), load_file(resumed / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_memory_plan_uses_the_batches_tokens(tiny_qwen):
    """gradient_checkpointing: auto and auto-fit plan the largest micro-batch: the budget when set (padded or not), the
    row of micro_batch x cutoff_len tokens when padding-free (eager's scores span the whole row); FlashAttention-2
    runs padding-free rows without a mask, sdpa gets transformers' block mask (and repeats k/v heads for it)."""
    from dataclasses import replace

    from tunekit.plan.activations import layer_kinds, layer_saved_per_token
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.checkpointing import decide_for
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup

    base = {
        "model_name_or_path": str(tiny_qwen),
        "cutoff_len": 1024,
        "per_device_train_batch_size": 2,
        "use_cpu": True,
    }  # fp32, as the CPU suite runs (a GPU plan is bf16)
    plain = resolve_setup(load_config(None, base))
    budget = resolve_setup(load_config(None, {**base, "max_tokens_per_batch": 4096}))
    free = resolve_setup(load_config(None, {**base, "padding_free": True}))
    free_fa2 = resolve_setup(load_config(None, {**base, "padding_free": True, "flash_attn": "fa2"}))
    assert (plain.tokens, budget.tokens, free.tokens) == (2048, 4096, 2048)
    assert (plain.row_len, budget.row_len, free.row_len) == (1024, 1024, 2048)
    assert (plain.padded, free.padded, free_fa2.padded) == (True, True, False)
    shape = load_shape(None, str(tiny_qwen))
    assert decide_for(shape, budget).peak_without_bytes > decide_for(shape, plain).peak_without_bytes
    eager = replace(free, attn="eager")
    kind = layer_kinds(shape, eager, count_params(shape, eager))[-1]
    per_token = layer_saved_per_token(shape, eager, kind) - layer_saved_per_token(
        shape, replace(plain, attn="eager"), kind
    )
    assert per_token == 4 * shape.heads * 1024  # the fp32 softmax over 1,024 more key positions per query


def test_llamafactory_batching_strategy_is_read_as_the_options():
    """LLaMA-Factory v1's batching_strategy; its dynamic batching budget is cutoff_len x micro-batch size."""
    free = load_config(None, {"batching_strategy": "padding_free"})
    assert (free.padding_free, free.max_tokens_per_batch) == (True, None)
    both = load_config(
        None, {"batching_strategy": "dynamic_padding_free", "cutoff_len": 512, "per_device_train_batch_size": 2}
    )
    assert (both.padding_free, both.max_tokens_per_batch) == (True, 1024)
    dynamic = load_config(None, {"batching_strategy": "dynamic_batching"})
    assert (dynamic.padding_free, dynamic.max_tokens_per_batch) == (False, 2048 * 8)
    with pytest.raises(
        ConfigError, match="batching_strategy padding_free .LLaMA-Factory's name. disagrees with padding_free false"
    ):
        load_config(None, {"batching_strategy": "padding_free", "padding_free": False})


def test_neat_rows_go_to_flash_attention_as_one_row():
    """transformers' FA2 path finds varlen boundaries in position ids only for batch dimension 1: several neat-packed
    rows would each run as one causal sequence, so with FA2 the collator sends them as one row; the cu_seqlens FA2
    derives from it are exactly the samples' boundaries."""
    from transformers.modeling_flash_attention_utils import _is_packed_sequence, prepare_fa_kwargs_from_position_ids

    rows = [
        {"input_ids": [5, 6, 7, 8, 9], "labels": [5, 6, 7, -100, 9], "position_ids": [0, 1, 2, 0, 1]},
        {"input_ids": [3, 4], "labels": [3, 4], "position_ids": [0, 1]},
    ]
    padded = PaddingCollator(pad_token_id=0, pad_to_multiple_of=4)(rows)
    assert not _is_packed_sequence(padded["position_ids"], batch_size=2)  # what FA2 would do without flattening
    flat = PaddingCollator(pad_token_id=0, pad_to_multiple_of=4, flatten_packed=True)(rows)
    assert flat["input_ids"].tolist() == [[5, 6, 7, 8, 9, 3, 4]]
    assert flat["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1]]
    assert flat["labels"].tolist() == [[-100, 6, 7, -100, 9, -100, 4]]
    assert _is_packed_sequence(flat["position_ids"], batch_size=1)
    (cu_q, cu_k), (max_q, _) = prepare_fa_kwargs_from_position_ids(flat["position_ids"])
    assert cu_q.tolist() == cu_k.tolist() == [0, 3, 5, 7] and int(max_q) == 3
    # and the padding-free row of plain samples alike
    free = PaddingFreeCollator()([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}, {"input_ids": [5, 6]}])
    assert prepare_fa_kwargs_from_position_ids(free["position_ids"])[0][0].tolist() == [0, 3, 4, 6]


def test_padding_share_and_tokens_per_step_by_hand():
    from tunekit.plan.batching import batching_summary, training_rows

    lengths = [10, 3, 7, 12, 5, 5, 2, 9]
    # the budget batches pinned above: {12, 10} {9, 7} {5, 5, 3} {2} cost 24 + 24 + 24 + 4 = 76 tokens for 53 real
    s = batching_summary(lengths, 2, accum=2, pad_to=4, budget=24)
    assert (s["micro_batches"], s["steps_per_epoch"], s["model_tokens"], s["real_tokens"]) == (4, 2, 76, 53)
    assert (s["padding_share"], s["model_tokens_per_step"], s["real_tokens_per_step"]) == (
        round(1 - 53 / 76, 6),
        38.0,
        26.5,
    )
    free = batching_summary(lengths, 2, accum=2, padding_free=True)
    assert (free["padding_share"], free["model_tokens"], free["steps_per_epoch"]) == (0.0, 53, 2)
    # rows the trainer gets: cut to cutoff_len, or best-fit packed (sft) per dataset
    table = {"dataset": ["a"] * 4 + ["b"] * 2, "total_len": [30, 5, 20, 12, 40, 8]}
    assert training_rows(table, "sft", 24, False).tolist() == [24, 5, 20, 12, 24, 8]
    assert sorted(training_rows(table, "sft", 24, True).tolist()) == [
        8,
        17,
        20,
        24,
        24,
    ]  # a: {24} {20} {12 5}; b: {24} {8}
