"""``neat_packing``: every packed sample gets exactly the logits and loss it gets alone.

A row packing samples A, B, C is run through the tiny Qwen2 (sdpa and eager); each sample's slice of the
logits must equal the logits of that sample run alone within 1e-5 (float32; measured ~1e-6). Plain packing
is checked to differ (B attends to A), so the comparison can fail. The summed token loss of the packed
batch equals the unpacked one. Then the collator's tensors are pinned and a short training run goes
through the Trainer with ``neat_packing``.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tests.tolerances import sum_order_bound
from tunekit.config import load_config
from tunekit.data.collator import PaddingCollator
from tunekit.errors import ConfigError
from tunekit.flow import run_train

# The packed and unpacked forwards run in float64: they differ only in matmul blocking and padding shapes, so each
# logit (|logit| < 10 through 2 layers of width 64) carries a relative error of at most a few times 64 * 2**-53 per
# layer (~1e-13 in all). 1e-10 leaves a thousandfold margin, and is eight orders below the effect guarded: a token that
# attends across a sample boundary moves its logits by > 1e-3 (asserted below). In float32 the same comparison depends
# on the machine's kernels (the summation orders differ between CPUs).
TOL = 1e-10


@pytest.fixture(scope="module")
def prepared(tiny_qwen, tmp_path_factory):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    folder = tmp_path_factory.mktemp("neat")
    write_dataset(folder, "toy", alpaca_records(12, seed=4))
    cfg = load_config(None, base_config(tiny_qwen, folder, folder / "o", cutoff_len=200, train_on_prompt=True))
    tok = load_tokenizer(cfg)
    plain = prepare_datasets(cfg, tok, "sft").train
    neat = prepare_datasets(cfg.model_copy(update={"packing": True, "neat_packing": True}), tok, "sft").train
    packed = prepare_datasets(cfg.model_copy(update={"packing": True}), tok, "sft").train
    return tok, plain, neat, packed


def _members(row) -> list[int]:
    return [int(src.rsplit(" ", 1)[-1]) for src in row["_source"].split("; ")]


def _model(path, attn):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64, attn_implementation=attn).eval()
    model.config.use_cache = False  # as in training: with a KV cache transformers does not look for packed positions
    return model


def test_rows_restart_positions_and_cut_the_label_link(prepared):
    _, plain, neat, packed = prepared
    row = max(neat, key=lambda r: len(_members(r)))
    members = _members(row)
    assert len(members) >= 3
    pos, expected_pos, expected_labels = 0, [], []
    for k, i in enumerate(members):
        n = len(plain[i]["input_ids"])
        expected_pos += list(range(n))
        expected_labels += plain[i]["labels"] if k == 0 else [-100] + plain[i]["labels"][1:]
        assert plain[i]["labels"][0] != -100  # train_on_prompt: the link would be trained without the cut
        pos += n
    assert row["position_ids"] == expected_pos and row["labels"] == expected_labels
    assert "position_ids" not in packed.column_names  # plain packing keeps the model's own positions


def test_collator_sends_positions_and_no_mask():
    batch = PaddingCollator(pad_token_id=0, pad_to_multiple_of=4)(
        [
            {"input_ids": [5, 6, 7, 8, 9], "labels": [-100, 6, 7, -100, 9], "position_ids": [0, 1, 2, 0, 1]},
            {"input_ids": [5, 6], "labels": [-100, 6], "position_ids": [0, 1]},
        ]
    )
    assert set(batch) == {"input_ids", "position_ids", "labels"}
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2], [0, 1, 0, 1, 2, 3, 4, 5]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, 9, -100, -100, -100], [-100, 6] + [-100] * 6]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_each_packed_sample_gets_its_own_logits(prepared, tiny_qwen, attn):
    tok, plain, neat, packed = prepared
    model = _model(tiny_qwen, attn)
    collate = PaddingCollator(pad_token_id=tok.pad_token_id)
    rows = sorted(neat, key=lambda r: -len(_members(r)))[:2]  # a batch of two packed rows, the shorter one padded
    batch = collate([{k: r[k] for k in ("input_ids", "labels", "position_ids")} for r in rows])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        plain_row = next(r for r in packed if len(_members(r)) >= 2)
        cross = model(input_ids=torch.tensor([plain_row["input_ids"]])).logits[0]
    worst = 0.0
    for b, row in enumerate(rows):
        pos = 0
        for i in _members(row):
            ids = plain[i]["input_ids"]
            with torch.no_grad():
                alone = model(input_ids=torch.tensor([ids])).logits[0]
            worst = max(worst, (logits[b, pos : pos + len(ids)] - alone).abs().max().item())
            pos += len(ids)
    assert worst <= TOL, worst
    # plain packing: the second sample attends to the first, so its logits differ from the sample alone
    first, second = _members(plain_row)[:2]
    n0, ids1 = len(plain[first]["input_ids"]), plain[second]["input_ids"]
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([ids1])).logits[0]
    assert (cross[n0 : n0 + len(ids1)] - alone).abs().max().item() > 1e-3


def test_packed_loss_equals_unpacked_loss(prepared, tiny_qwen):
    tok, plain, neat, _ = prepared
    model = _model(tiny_qwen, "sdpa")
    collate = PaddingCollator(pad_token_id=tok.pad_token_id)
    cols = ("input_ids", "labels", "position_ids")
    with torch.no_grad():
        batch = collate([{k: r[k] for k in cols} for r in neat])
        packed_sum = model(**batch, num_items_in_batch=torch.tensor(1)).loss.item()
        unpacked = 0.0
        for r in plain:
            one = collate([{k: r[k] for k in ("input_ids", "labels")}])
            unpacked += model(**one, num_items_in_batch=torch.tensor(1)).loss.item()
    # The float64 logits agree to ~1e-12, but Hugging Face's loss casts logits to float32 and sums the per-token
    # cross-entropies (all positive) in one float32 reduction for the packed batch and per sample for the unpacked
    # ones: two orders of n positive terms differ by at most sum_order_bound(n, total) (measured: 9e-8 relative).
    n = sum(sum(1 for x in r["labels"][1:] if x != -100) for r in plain)
    assert abs(packed_sum - unpacked) <= sum_order_bound(n, unpacked), (packed_sum, unpacked)


def test_training_with_neat_packing(tiny_qwen, tmp_path):
    write_dataset(tmp_path / "d", "toy", alpaca_records(24, seed=5))
    out = tmp_path / "out"
    run_train(
        load_config(
            None,
            base_config(
                tiny_qwen,
                tmp_path / "d",
                out,
                packing=True,
                neat_packing=True,
                cutoff_len=128,
                per_device_train_batch_size=2,
                max_steps=2,
            ),
        )
    )
    losses = logged_losses(out)
    assert len(losses) == 2 and all(0 < x < 20 for x in losses)


def test_neat_packing_is_refused_for_pt():
    with pytest.raises(ConfigError, match="neat_packing is for sft"):
        load_config(None, {"stage": "pt", "packing": True, "neat_packing": True})
