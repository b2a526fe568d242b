"""``thought_loss_weight`` between 0 and 1: the weighted SFT loss (train/thought_loss.py) against a float64 reference.

The rows come from the real pipeline (template qwen3, a tiny Qwen3 model folder). Each trained target ``t`` weighs
``w`` when it is a token of a thought block, else 1, and an optimizer step's loss is ``sum w_t CE_t / sum w_t`` over
the step's trained targets (its micro-batches together). The reference is computed here from the model's float64
logits with float64 cross-entropy; the trainer runs the same float64 model and casts the logits to float32 for its
cross-entropy (as Hugging Face's loss does), so the two differ only by that float32 step. Per token: the logits' cast
(``|z| u`` each, twice in ``z_y - logsumexp``) and the V-term sum inside the log-sum-exp (relative ``V u``, so ``V u``
after the log), i.e. ``(V + 2 max|z|) u``, which the weighted mean keeps (the weights are normalised); then the sum of
the n weighted terms, ``sum_order_bound(n, sum w_t CE_t) / sum w_t`` (tests/tolerances.py, Higham eq. 4.4).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import logged_losses, write_dataset
from tests.tolerances import FP32_U, sum_order_bound
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets

IGNORE = -100
U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731
CONVERSATIONS = [
    [U("What is 2+2?"), A("<think>\nAdd the two numbers: two and two make four.\n</think>\n\n4")],
    [U("What is 3+3?"), A("6")],  # no thought: its empty block is the weighted span
    [U("2+2?"), A("<think>\nAdd.\n</think>\n\n4"), U("And times 3?"), A("<think>\nMultiply 4 by 3.\n</think>\n\n12")],
    [U("Name a colour."), A("<think>\nAny will do; pick a primary colour.\n</think>\n\nBlue.")],
]
WEIGHT = 0.25


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    from tunekit.tiny.text import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3") / "model", like="qwen3", seed=0)


def _options(model, tmp_path, **opts) -> dict:
    folder = tmp_path / "data"
    write_dataset(folder, "think", [{"messages": m} for m in CONVERSATIONS], {"formatting": "openai"}, ".jsonl")
    return {
        "model_name_or_path": str(model),
        "dataset": "think",
        "dataset_dir": str(folder),
        "output_dir": str(tmp_path / "out"),
        "template": "qwen3",
        "cutoff_len": 256,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
        **opts,
    }


def _rows(model, tmp_path, **opts):
    from tunekit.model.loader import load_tokenizer

    cfg = load_config(None, _options(model, tmp_path, **opts))
    tok = load_tokenizer(cfg)
    return cfg, tok, list(prepare_datasets(cfg, tok).train)


def test_thought_mask_marks_exactly_what_weight_zero_masks(tiny_qwen3, tmp_path):
    _, _, weighted = _rows(tiny_qwen3, tmp_path / "w", thought_loss_weight=WEIGHT)
    _, _, whole = _rows(tiny_qwen3, tmp_path / "one")
    _, tok, off = _rows(tiny_qwen3, tmp_path / "zero", thought_loss_weight=0)
    assert all("thought_mask" not in row for row in whole + off)  # weights 1 and 0 need no marks
    for row, one, zero in zip(weighted, whole, off):
        assert row["input_ids"] == one["input_ids"] == zero["input_ids"]
        assert row["labels"] == one["labels"]  # weighted: every token still trained
        masked = [int(a != b) for a, b in zip(one["labels"], zero["labels"])]
        assert row["thought_mask"] == masked
    first = weighted[0]
    thought = [i for i, m in zip(first["input_ids"], first["thought_mask"]) if m]
    assert tok.decode(thought) == "<think>\nAdd the two numbers: two and two make four.\n</think>\n\n"
    marked = [tok.decode([i for i, m in zip(r["input_ids"], r["thought_mask"]) if m]) for r in weighted[1:3]]
    assert marked == ["<think>\n\n</think>\n\n", "<think>\nAdd.\n</think>\n\n<think>\nMultiply 4 by 3.\n</think>\n\n"]


def _reference(model, batches, weight) -> tuple[float, float]:
    """(weighted loss in float64 over all the batches' trained targets, its float32 tolerance: see the module doc)."""
    total, weights, n, zmax = 0.0, 0.0, 0, 0.0
    with torch.no_grad():
        for b in batches:
            inputs = {k: v for k, v in b.items() if k not in ("labels", "thought_mask")}
            logits = model(**inputs).logits.double()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            targets, thought = b["labels"][:, 1:], b["thought_mask"][:, 1:]
            trained = targets != IGNORE
            ce = -logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            w = torch.where(thought.bool(), weight, 1.0).double() * trained
            total += float((w * ce).sum())
            weights += float(w.sum())
            n += int(trained.sum())
            zmax = max(zmax, float(logits.abs().max()))
    per_token = (model.config.vocab_size + 2 * zmax) * FP32_U
    return total / weights, per_token + sum_order_bound(n, total) / weights


LAYOUTS = {  # the options of each batch layout (padded rows; one padding-free row; packed rows, plain or neat)
    "padded": {},
    "padding_free": {"padding_free": True},
    "packing": {"packing": True},
    "neat_packing": {"packing": True, "neat_packing": True},
}


def _batches(tok, rows, layout):
    """Two micro-batches of the rows (one when packing made a single row), collated as the run collates them."""
    from tunekit.data.collator import PaddingCollator
    from tunekit.data.padding_free import PaddingFreeCollator

    pad = tok.pad_token_id
    collate = PaddingFreeCollator(pad_token_id=pad) if layout == "padding_free" else PaddingCollator(pad_token_id=pad)
    keep = ("input_ids", "labels", "thought_mask", "position_ids")
    half = max(1, len(rows) // 2)
    return [collate([{k: r[k] for k in keep if k in r} for r in part]) for part in (rows[:half], rows[half:]) if part]


def _samples(batches) -> list[tuple]:
    """Each padded row's (ids, labels, thought marks) without its padding."""
    out = []
    for b in batches:
        for i, n in enumerate(b["attention_mask"].sum(dim=1).tolist()):
            out.append(tuple(tuple(b[k][i, :n].tolist()) for k in ("input_ids", "labels", "thought_mask")))
    return out


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("trained_tokens_loss", [True, False])
def test_weighted_loss_equals_the_float64_hand_computation(tiny_qwen3, tmp_path, trained_tokens_loss, layout):
    from transformers import AutoModelForCausalLM, TrainingArguments

    from tunekit.data.collator import PaddingCollator
    from tunekit.train.trainer import TunekitTrainer

    opts = {"thought_loss_weight": WEIGHT, "trained_tokens_loss": trained_tokens_loss, **LAYOUTS[layout]}
    cfg, tok, rows = _rows(tiny_qwen3, tmp_path, **opts)
    assert all(len(r["thought_mask"]) == len(r["input_ids"]) and any(r["thought_mask"]) for r in rows)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float64)
    batches = _batches(tok, rows, layout)
    assert all("thought_mask" in b and b["thought_mask"].shape == b["input_ids"].shape for b in batches)
    args = TrainingArguments(
        output_dir=str(tmp_path / "args"), use_cpu=True, report_to=[], gradient_accumulation_steps=len(batches)
    )
    collate = PaddingCollator(pad_token_id=tok.pad_token_id)  # group_within_step re-deals padded rows (same step)
    trainer = TunekitTrainer(model=model, args=args, data_collator=collate, tunekit_config=cfg)
    got_batches, weight_sum = trainer.get_batch_samples(iter(batches), len(batches), torch.device("cpu"))
    if layout == "padded":  # the step's rows sorted by length and dealt again, each with its own thought marks
        assert [b["input_ids"].shape[0] for b in got_batches] == [2, 2]
        assert [int(b["thought_mask"].sum()) for b in got_batches] != [int(b["thought_mask"].sum()) for b in batches]
        assert sorted(_samples(got_batches)) == sorted(_samples(batches))
    ref, tol = _reference(model, batches, WEIGHT)
    by_hand = sum(float(b["labels"][:, 1:].ne(IGNORE).sum()) for b in batches)
    by_hand -= (1 - WEIGHT) * sum(
        float((b["thought_mask"][:, 1:] * b["labels"][:, 1:].ne(IGNORE)).sum()) for b in batches
    )
    assert float(weight_sum) == by_hand  # the step's summed weights (sums of 1 and 0.25: exact in float32)
    loss = sum(trainer.compute_loss(model, b, num_items_in_batch=weight_sum) for b in got_batches)
    assert abs(loss.item() - ref) <= tol, (loss.item(), ref, tol)
    unweighted = _reference(model, batches, 1.0)[0]
    assert abs(unweighted - ref) > 10 * tol  # the weight changes the loss beyond the tolerance


def test_each_target_weighs_what_its_token_is():
    """Position t predicts token t+1: its weight is token t+1's (a thought token: the weight; else 1)."""
    from tunekit.train.thought_loss import target_weights
    from tunekit.train.token_loss import trained_positions

    labels = torch.tensor([[IGNORE, IGNORE, 5, 6, 7, 8], [IGNORE, 9, 10, IGNORE, IGNORE, IGNORE]])
    thought = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]])
    keep, targets = trained_positions(labels)
    assert targets.tolist() == [5, 6, 7, 8, 9, 10]
    assert target_weights(labels, thought, 0.25).tolist() == [0.25, 0.25, 1.0, 1.0, 0.25, 1.0]


def test_training_with_a_weighted_thought_lies_between_off_and_on(tiny_qwen3, tmp_path):
    from tunekit.flow import run_train

    first = {}
    for weight in (0, 0.5, 1):
        opts = _options(tiny_qwen3, tmp_path / str(weight), thought_loss_weight=weight, max_steps=1, logging_steps=1)
        run_train(load_config(None, {**opts, "per_device_train_batch_size": 4, "learning_rate": 1e-3}))
        first[weight] = logged_losses(tmp_path / str(weight) / "out")[0]
    # (A + w T) / (N_a + w N_t) moves monotonically from the answer-only mean (w = 0) to the whole mean (w = 1)
    low, high = sorted((first[0], first[1]))
    assert low < first[0.5] < high, first
