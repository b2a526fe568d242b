"""Padding-free batches and packing with media (multimodal): tiny Qwen2-VL in float64.

A padding-free row of image samples must give every sample exactly the logits, loss and gradients the padded batch
gives it: the media tensors are the samples' own, concatenated in sample order; the 3-D rotary positions (M-RoPE)
are each sample's ``get_rope_index`` as if it were alone; attention never crosses a sample (the sdpa mask and the
positions FlashAttention-2 reads). Each equivalence is paired with a variant that must differ, so the tests can fail.
"""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import write_dataset
from tests.tolerances import FP32_U, FP64_U, loss_tolerance, sum_order_bound
from tunekit.data.collator import MultimodalCollator
from tunekit.data.padding_free import PaddingFreeCollator, padding_free_collator, refuse_family, rope_index_of
from tunekit.errors import ConfigError

SMALL = 28 * 28 * 16  # image_max_pixels: the demo images become 1 x 4 x 10 .. grids, i.e. ~10 image tokens each
SHAREGPT = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "images": "images"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}
# float64 forwards of the same samples, padded vs one row: they differ only in matmul blocking and the mask's shape,
# so each logit (|logit| < 2 in this tiny model, 2 text + 2 vision layers of width <= 256) carries a relative error of
# a few times 256 * 2**-53 per layer (~1e-13 in all); 1e-10 leaves a thousandfold margin and is eight orders below
# the effect guarded (image tokens rotated as text, or a token attending across samples, moves logits by > 1e-3).
LOGIT_TOL = 1e-10


@pytest.fixture(scope="module")
def vl(tmp_path_factory, demo_dir):
    """Tiny Qwen2-VL, the six mllm_demo samples (1-2 images each), its plugin and a float64 sdpa model."""
    from transformers import AutoModelForImageTextToText

    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer
    from tunekit.tiny.vlm import build_tiny_vlm

    root = tmp_path_factory.mktemp("pf-media")
    model_dir = build_tiny_vlm(root / "model", like="qwen2-vl", seed=0)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model_dir),
            "template": "qwen2_vl",
            "dataset": "mllm_demo",
            "dataset_dir": str(demo_dir),
            "output_dir": str(root / "o"),
            "stage": "sft",
            "cutoff_len": 1024,
            "image_max_pixels": SMALL,
            "report_to": "none",
        },
    )
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "sft")
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="sdpa")
    model.config.use_cache = False  # as in training (model/loader.py): with a KV cache transformers does not look for
    model.config.get_text_config().use_cache = False  # packed positions, and the language model reads its own config
    feats = [data.train[i] for i in range(4)]
    return types.SimpleNamespace(cfg=cfg, tok=tok, mm=data.mm, model=model, feats=feats, dir=model_dir, data=data)


def _free(vl, feats=None, mm=None):
    return PaddingFreeCollator(pad_token_id=vl.tok.pad_token_id, mm=mm or vl.mm, rope_index=rope_index_of(vl.model))(
        feats or vl.feats
    )


def _padded(vl, feats=None, mm=None):
    return MultimodalCollator(pad_token_id=vl.tok.pad_token_id, pad_to_multiple_of=8, mm=mm or vl.mm)(
        feats or vl.feats
    )


def test_the_row_carries_each_samples_media_and_its_own_3d_positions(vl):
    feats = vl.feats
    batch = _free(vl)
    lengths = [len(f["input_ids"]) for f in feats]
    total = sum(lengths)
    assert set(batch) == {"input_ids", "position_ids", "labels", "pixel_values", "image_grid_thw", "mm_token_type_ids"}
    assert batch["position_ids"].shape == (4, 1, total) and batch["input_ids"].shape == (1, total)
    assert batch["position_ids"][0, 0].tolist() == [p for n in lengths for p in range(n)]  # text positions restart
    # media: every sample's own patches and grids, in sample order (what the plugin gives each sample alone)
    alone = [vl.mm.collate(f["images"], torch.tensor([f["input_ids"]])) for f in feats]
    assert torch.equal(batch["pixel_values"], torch.cat([a["pixel_values"] for a in alone]))
    assert torch.equal(batch["image_grid_thw"], torch.cat([a["image_grid_thw"] for a in alone]))
    assert batch["image_grid_thw"].shape[0] == sum(len(f["images"]) for f in feats) == 6
    # M-RoPE: each sample's slice is the model's get_rope_index of that sample alone (offsets restart at 0)
    start = 0
    for f, a, n in zip(feats, alone, lengths):
        ids = torch.tensor([f["input_ids"]])
        own, _ = vl.model.model.get_rope_index(
            ids, mm_token_type_ids=a["mm_token_type_ids"], image_grid_thw=a["image_grid_thw"]
        )
        assert torch.equal(batch["position_ids"][1:, :, start : start + n], own), start
        assert batch["position_ids"][:, 0, start].tolist() == [0, 0, 0, 0]
        start += n
    # the rule itself, on sample 0's first image (grid t x h x w, merged 2 x 2): the k-th image token at
    # (s, s + row, s + column), s = the image's first index; the text after it resumes at s + max(h, w) / 2
    pad = vl.tok.convert_tokens_to_ids("<|image_pad|>")
    ids0 = feats[0]["input_ids"]
    s = ids0.index(pad)
    t, h, w = batch["image_grid_thw"][0].tolist()
    hh, ww = h // 2, w // 2
    rope = batch["position_ids"][1:, 0]
    assert t == 1 and rope[:, s : s + hh * ww].tolist() == [
        [s] * (hh * ww),
        [s + r for r in range(hh) for _ in range(ww)],
        [s + c for _ in range(hh) for c in range(ww)],
    ]
    assert rope[:, s + hh * ww].tolist() == [s + max(hh, ww)] * 3


def _capture_attention(model, batch):
    """The attention mask and the position ids the first decoder layer's attention receives."""
    seen = {}

    def grab(_module, _args, kwargs):
        seen.update(mask=kwargs.get("attention_mask"), positions=kwargs.get("position_ids"))

    handle = model.model.language_model.layers[0].self_attn.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            model(**{k: v for k, v in batch.items() if k != "labels"})
    finally:
        handle.remove()
    return seen


def test_attention_never_crosses_a_sample_sdpa_mask_and_varlen_boundaries(vl):
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    batch = _free(vl)
    lengths = [len(f["input_ids"]) for f in vl.feats]
    seg = torch.tensor([k for k, n in enumerate(lengths) for _ in range(n)])
    seen = _capture_attention(vl.model, batch)
    causal = torch.ones(len(seg), len(seg), dtype=torch.bool).tril()
    expected = causal & (seg[:, None] == seg[None, :])
    assert seen["mask"].shape == (1, 1, len(seg), len(seg)) and torch.equal(seen["mask"][0, 0], expected)
    # FlashAttention-2 (GPU) gets no mask and takes its varlen boundaries from these positions
    (cu_q, cu_k), _ = prepare_fa_kwargs_from_position_ids(seen["positions"])
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    assert cu_q.tolist() == cu_k.tolist() == bounds


def _f64_loss(logits, labels):
    targets = F.pad(labels[:, 1:], (0, 1), value=-100)
    keep = targets != -100
    return F.cross_entropy(logits[keep], targets[keep], reduction="sum") / keep.sum()


def _grads(model, batch):
    model.zero_grad()
    out = model(**{k: v for k, v in batch.items() if k != "labels"})
    loss = _f64_loss(out.logits, batch["labels"])
    loss.backward()
    return (
        loss.detach(),
        out.logits.detach(),
        {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None},
    )


def _max_logit_gap(free_logits, padded_logits, feats) -> float:
    worst, start = 0.0, 0
    for row, f in enumerate(feats):
        k = len(f["input_ids"])
        worst = max(worst, (free_logits[0, start : start + k] - padded_logits[row, :k]).abs().max().item())
        start += k
    return worst


def test_loss_logits_and_gradients_equal_the_padded_batch(vl):
    model, feats = vl.model, vl.feats
    padded, free = _padded(vl), _free(vl)
    loss_p, logits_p, grads_p = _grads(model, padded)
    loss_f, logits_f, grads_f = _grads(model, free)
    n = int((padded["labels"][:, 1:] != -100).sum())
    assert int((free["labels"][:, 1:] != -100).sum()) == n
    assert _max_logit_gap(logits_f, logits_p, feats) <= LOGIT_TOL
    # loss: log-softmax is 2-Lipschitz in max-norm, plus two float64 summation orders of the mean over n tokens
    assert abs(loss_f.item() - loss_p.item()) <= 2 * LOGIT_TOL + loss_tolerance(n, loss_p.item(), FP64_U)
    # gradients (vision tower included: it sees the same pixel_values in both layouts): each element is a sum over the
    # n trained tokens' paths of products through the widest contraction (the vocabulary, 1,856; the 248 image
    # patches are fewer) and the 4 layers, i.e. at most m = n * V * 4 terms; two orders differ by at most
    # sum_order_bound(m, sum|terms|, FP64_U). With sum|terms| <= 1e3 x the tensor's largest element (terms cancelling
    # to a thousandth) that is ~1e-6 of the element for m ~ 1e6: four orders under the > 1e-2 change of the guards.
    terms = n * max(model.config.text_config.vocab_size, model.config.text_config.intermediate_size) * 4
    assert set(grads_f) == set(grads_p) and any(k.startswith("model.visual") for k in grads_p)
    for name, g in grads_p.items():
        bound = sum_order_bound(terms, g.abs().max().item() * 1e3, FP64_U) + 1e-300
        assert (grads_f[name] - g).abs().max().item() <= bound, name

    def worst_change(batch):
        grads = _grads(model, batch)[2]
        return max(((grads[k] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item() for k, g in grads_p.items())

    # guard 1: image tokens rotated as text (the 3 M-RoPE rows = the text positions), the mask still block-diagonal
    as_text = dict(free, position_ids=free["position_ids"][:1].expand(4, -1, -1).clone())
    assert worst_change(as_text) > 1e-2
    # guard 2: the row as one sequence (no positions: the model numbers the whole row, no packed mask)
    assert worst_change({k: v for k, v in free.items() if k != "position_ids"}) > 1e-2


def test_videos_in_the_row_get_their_own_grids_and_3d_positions(vl, demo_dir, tmp_path):
    """mllm_video_demo (one clip per sample): the row's pixel_values_videos / video_grid_thw are the samples' own in
    order, and every sample's logits equal the padded batch's (video M-RoPE: t, h, w per frame group)."""
    pytest.importorskip("av")
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets

    cfg = load_config(
        None,
        {
            "model_name_or_path": str(vl.dir),
            "template": "qwen2_vl",
            "dataset": "mllm_video_demo",
            "dataset_dir": str(demo_dir),
            "output_dir": str(tmp_path / "o"),
            "stage": "sft",
            "video_max_pixels": SMALL,
            "video_maxlen": 4,
            "report_to": "none",
        },
    )
    data = prepare_datasets(cfg, vl.tok, "sft")
    feats = [data.train[i] for i in range(3)]
    free, padded = _free(vl, feats, data.mm), _padded(vl, feats, data.mm)  # the plugin of the video options
    assert free["video_grid_thw"].shape[0] == 3 and free["video_grid_thw"][:, 0].gt(1).all()  # several frame groups
    assert torch.equal(free["pixel_values_videos"], padded["pixel_values_videos"])
    assert torch.equal(free["video_grid_thw"], padded["video_grid_thw"])
    with torch.no_grad():
        lf = vl.model(**{k: v for k, v in free.items() if k != "labels"}).logits
        lp = vl.model(**{k: v for k, v in padded.items() if k != "labels"}).logits
    assert _max_logit_gap(lf, lp, feats) <= LOGIT_TOL


def test_trainer_loss_of_the_row_equals_the_padded_batch(vl, tmp_path):
    """TunekitTrainer.compute_loss (trained-token LM head, token-normalised) takes the [4, 1, T] positions."""
    from tunekit.config import load_config
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.trainer import TunekitTrainer

    cfg = load_config(
        None,
        {
            **{
                k: getattr(vl.cfg, k)
                for k in ("model_name_or_path", "template", "dataset", "dataset_dir", "image_max_pixels")
            },
            "output_dir": str(tmp_path / "o"),
            "stage": "sft",
            "dtype": "float64",
            "report_to": "none",
        },
    )
    trainer = TunekitTrainer(
        model=vl.model, args=build_training_arguments(cfg, []), processing_class=vl.tok, tunekit_config=cfg
    )
    padded, free = _padded(vl), _free(vl)
    n = int((padded["labels"][:, 1:] != -100).sum())
    with torch.no_grad():
        lp = trainer.compute_loss(vl.model, padded, num_items_in_batch=torch.tensor(n)).item()
        lf = trainer.compute_loss(vl.model, free, num_items_in_batch=torch.tensor(n)).item()
    # tunekit's loss (like HF's) takes the cross-entropy in float32: two float32 sums of n terms
    assert abs(lf - lp) <= loss_tolerance(n, lp, FP32_U), (lf, lp)


def test_neat_packed_rows_carry_their_media_and_per_sample_3d_positions(vl):
    """packing keeps each sample's images (in sample order); neat-packed rows get [4, B, W] positions, each packed
    sample's own, so its logits equal the unpacked sample's (before: 1-D rotary positions and no mask at all)."""
    from tunekit.data.processors.packing import pack_dataset

    sample = vl.data.train.select(range(4))
    packed = pack_dataset(sample, 2 * max(len(x) for x in sample["input_ids"]), neat=True)
    by_source = {s: list(im) for s, im in zip(sample["_source"], sample["images"])}
    for row in packed:
        assert row["images"] == [p for s in row["_source"].split("; ") for p in by_source[s]]
    feats = [packed[i] for i in range(len(packed))]
    assert len(feats) < 4  # some row holds more than one sample
    collate = MultimodalCollator(pad_token_id=vl.tok.pad_token_id, mm=vl.mm, rope_index=rope_index_of(vl.model))
    batch = collate(feats)
    assert batch["position_ids"].shape == (4, *batch["input_ids"].shape) and "attention_mask" not in batch
    with torch.no_grad():
        logits = vl.model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    order = {s: i for i, s in enumerate(sample["_source"])}
    worst = 0.0
    for r, row in enumerate(feats):
        start = 0
        for src in row["_source"].split("; "):
            one = sample[order[src]]
            alone = PaddingFreeCollator(mm=vl.mm, rope_index=rope_index_of(vl.model))([one])
            with torch.no_grad():
                ref = vl.model(**{k: v for k, v in alone.items() if k != "labels"}).logits[0]
            k = len(one["input_ids"])
            worst = max(worst, (logits[r, start : start + k] - ref).abs().max().item())
            start += k
    assert worst <= LOGIT_TOL
    # FlashAttention-2 (GPU): the rows go as ONE row (data/collator.py), its varlen boundaries = the packed samples'
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    one = MultimodalCollator(
        pad_token_id=vl.tok.pad_token_id, mm=vl.mm, rope_index=rope_index_of(vl.model), flatten_packed=True
    )(feats)
    lengths = [len(sample[order[src]]["input_ids"]) for row in feats for src in row["_source"].split("; ")]
    assert one["position_ids"].shape == (4, 1, sum(lengths)) and torch.equal(
        one["pixel_values"], batch["pixel_values"]
    )
    (cu, _), _ = prepare_fa_kwargs_from_position_ids(one["position_ids"][0])
    assert cu.tolist() == [0, *torch.tensor(lengths).cumsum(0).tolist()]
    with torch.no_grad():
        flat = vl.model(**{k: v for k, v in one.items() if k != "labels"}).logits
    start = 0
    for r, row in enumerate(feats):
        k = len(row["input_ids"])
        assert (flat[0, start : start + k] - logits[r, :k]).abs().max().item() <= LOGIT_TOL
        start += k
    # the guard: the rows with their 2-D text positions only (what the model got before: image tokens rotated as text,
    # and no packed mask) give other logits
    plain = dict(batch, position_ids=batch["position_ids"][0])
    with torch.no_grad():
        wrong = vl.model(**{k: v for k, v in plain.items() if k != "labels"}).logits
    assert (wrong - logits).abs().max().item() > 1e-3


def _pair_data(tmp_path, demo_dir) -> Path:
    """Two dpo pairs with images (one image, then two)."""
    entry = {
        "formatting": "sharegpt",
        "ranking": True,
        "columns": {"messages": "messages", "images": "images", "chosen": "chosen", "rejected": "rejected"},
        "tags": SHAREGPT["tags"],
    }
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who is this?"}],
            "chosen": {"role": "assistant", "content": "Kane."},
            "rejected": {"role": "assistant", "content": "Nobody at all."},
            "images": ["mllm_demo_data/1.jpg"],
        },
        {
            "messages": [{"role": "user", "content": "Compare <image> and <image>."}],
            "chosen": {"role": "assistant", "content": "Two speeches."},
            "rejected": {"role": "assistant", "content": "Rain."},
            "images": ["mllm_demo_data/2.jpg", "mllm_demo_data/3.jpg"],
        },
    ]
    data_dir = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data_dir / "mllm_demo_data")
    write_dataset(data_dir, "toy", records, entry)
    return data_dir


def test_dpo_padding_free_with_images_equals_the_padded_pairs(vl, demo_dir, tmp_path):
    """Chosen and rejected of each pair share the row, each with the pair's images; per-sequence log-probs, the DPO
    loss and its gradients equal MultimodalPairCollator's padded batch."""
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.train.batching import MultimodalPairCollator, sequence_view
    from tunekit.train.losses import preference_loss
    from tunekit.train.stages.dpo import pair_collator
    from tunekit.train.stages.reference_policy import forward_logps, media_inputs

    data_dir = _pair_data(tmp_path, demo_dir)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(vl.dir),
            "template": "qwen2_vl",
            "dataset": "toy",
            "dataset_dir": str(data_dir),
            "output_dir": str(tmp_path / "o"),
            "stage": "dpo",
            "image_max_pixels": SMALL,
            "padding_free": True,
            "report_to": "none",
        },
    )
    data = prepare_datasets(cfg, vl.tok, "dpo")
    feats = [data.train[0], data.train[1]]
    free = pair_collator(cfg, vl.tok, data.mm, vl.model)(feats)
    padded = MultimodalPairCollator(pad_token_id=vl.tok.pad_token_id, mm=data.mm)(feats)
    lengths = [len(f[k]) for k in ("chosen_input_ids", "rejected_input_ids") for f in feats]
    assert free["cu_seqlens"].tolist() == [0, *torch.tensor(lengths).cumsum(0).tolist()]
    assert free["position_ids"].shape == (4, 1, sum(lengths))
    assert torch.equal(free["image_grid_thw"], padded["image_grid_thw"]) and free["image_grid_thw"].shape[0] == 6

    def loss_and_grads(batch):
        vl.model.zero_grad()
        logps, counts = forward_logps(vl.model, **sequence_view(batch), **media_inputs(batch))
        ref = torch.full_like(logps, -20.0)  # a fixed reference: the loss depends on the policy's log-probs only
        loss = preference_loss(
            "sigmoid", 0.1, logps[:2], logps[2:], ref[:2], ref[2:], counts[:2], counts[2:]
        ).losses.mean()
        loss.backward()
        return (
            logps.detach(),
            counts,
            {n: p.grad.clone() for n, p in vl.model.named_parameters() if p.grad is not None},
        )

    logps_p, counts_p, grads_p = loss_and_grads(padded)
    logps_f, counts_f, grads_f = loss_and_grads(free)
    assert counts_f.tolist() == counts_p.tolist()
    # each log-prob sum: <= counts tokens of 2 * LOGIT_TOL each (log-softmax 2-Lipschitz) plus a float64 sum order
    bounds = [
        k * 2 * LOGIT_TOL + sum_order_bound(k, abs(b), FP64_U) for b, k in zip(logps_p.tolist(), counts_p.tolist())
    ]
    for a, b, bound in zip(logps_f.tolist(), logps_p.tolist(), bounds):
        assert abs(a - b) <= bound, (a, b)
    terms = int(counts_p.sum()) * vl.model.config.text_config.vocab_size * 4  # as in the sft test
    for name, g in grads_p.items():
        assert (grads_f[name] - g).abs().max().item() <= sum_order_bound(
            terms, g.abs().max().item() * 1e3, FP64_U
        ) + 1e-300, name
    # the guard: the row without its M-RoPE rows (image tokens rotated as text) gives other log-probs
    with torch.no_grad():
        as_text = dict(free, position_ids=free["position_ids"][:1].expand(4, -1, -1).clone())
        other = forward_logps(vl.model, **sequence_view(as_text), **media_inputs(as_text))[0]
    assert (other - logps_p).abs().max().item() > 1e3 * max(bounds)  # measured 7e-4 against bounds of ~1e-8


FAMILIES = [
    ("llava", "llava", "mllm_demo", False),
    ("llava-next", "llava_next", "mllm_demo", False),
    ("qwen2.5-vl", "qwen2_vl", "mllm_demo", True),
    ("qwen3-vl", "qwen3_vl_nothink", "mllm_demo", True),
    ("qwen2-audio", "qwen2_audio", "mllm_audio_demo", False),
]


@pytest.mark.parametrize("like,template,dataset,mrope", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_the_other_families_give_each_sample_its_padded_logits(like, template, dataset, mrope, tmp_path, demo_dir):
    """LLaVA, LLaVA-NeXT and Qwen2-Audio (1-D positions: the row's plain restarting [1, T]), Qwen2.5-VL and Qwen3-VL
    (M-RoPE [4, 1, T]): the samples' media in order, and every sample's logits those of the padded batch."""
    import transformers

    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer
    from tunekit.tiny.vlm import build_tiny_vlm

    model_dir = build_tiny_vlm(tmp_path / "model", like=like, seed=0)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model_dir),
            "template": template,
            "dataset": dataset,
            "dataset_dir": str(demo_dir),
            "output_dir": str(tmp_path / "o"),
            "stage": "sft",
            "cutoff_len": 2048,
            "image_max_pixels": SMALL,
            "report_to": "none",
        },
    )
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "sft")
    feats = [data.train[i] for i in range(3)]
    auto = (
        transformers.Qwen2AudioForConditionalGeneration
        if like == "qwen2-audio"
        else transformers.AutoModelForImageTextToText
    )
    model = auto.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="sdpa")
    model.config.get_text_config().use_cache = False
    free = padding_free_collator(tok, data.mm, model)(feats)
    total = sum(len(f["input_ids"]) for f in feats)
    assert free["position_ids"].shape == ((4, 1, total) if mrope else (1, total))
    padded = MultimodalCollator(pad_token_id=tok.pad_token_id, mm=data.mm)(feats)
    media = [
        k for k in padded if k not in ("input_ids", "attention_mask", "labels", "mm_token_type_ids", "token_type_ids")
    ]
    assert media and all(torch.equal(free[k], padded[k]) for k in media)  # the same tensors, in sample order
    with torch.no_grad():
        lf = model(**{k: v for k, v in free.items() if k != "labels"}).logits
        lp = model(**{k: v for k, v in padded.items() if k != "labels"}).logits
    assert _max_logit_gap(lf, lp, feats) <= LOGIT_TOL


def test_the_gemma3_refusal_still_holds(tmp_path):
    """Why Gemma 3 is refused, in transformers itself: for a packed row its sliding-window mask looks the image blocks
    up by the restarted positions, so the second sample's image tokens lose their bidirectional block (the full mask is
    right). When transformers fixes this the test fails, and the refusal can go."""
    from transformers import AutoConfig
    from transformers.models.gemma3.modeling_gemma3 import (
        create_masks_for_vision_model,
        get_block_sequence_ids_for_mask,
    )

    from tunekit.tiny.vlm import build_tiny_vlm

    config = AutoConfig.from_pretrained(build_tiny_vlm(tmp_path / "gemma3", like="gemma3", seed=0)).get_text_config()
    config._attn_implementation = "sdpa"
    types_ = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0]])  # sample A: 2 text, 3 image, 2 text; B: 1, 2 image, 1
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3]])
    assert config.sliding_window > positions.shape[1]  # the window itself cuts nothing here
    blocks = get_block_sequence_ids_for_mask(types_)
    masks = create_masks_for_vision_model(
        config, torch.zeros(1, 11, config.hidden_size), None, None, positions, blocks
    )
    seg, blk = [0] * 7 + [1] * 4, blocks[0].tolist()
    expected = torch.tensor(
        [[seg[i] == seg[j] and (j <= i or blk[i] == blk[j] >= 0) for j in range(11)] for i in range(11)]
    )
    assert torch.equal(masks["full_attention"][0, 0], expected)
    sliding = masks["sliding_attention"][0, 0]
    assert not sliding[8, 9] and sliding[8, 8]  # B's first image token does not see B's second: its block is lost


def test_gemma3_is_refused_by_name():
    gemma = types.SimpleNamespace(NAME="gemma3")
    with pytest.raises(
        ConfigError,
        match="padding_free is not supported for the gemma3 family: transformers 5.24 builds "
        "Gemma 3's sliding-window mask",
    ):
        padding_free_collator(types.SimpleNamespace(pad_token_id=0), gemma)
    with pytest.raises(
        ConfigError,
        match="neat_packing is not supported for the gemma3 family: .* Remove neat_packing for "
        r"this model \(the padded batches are exact\)\.",
    ):
        refuse_family(gemma, "neat_packing")  # what stages/sft.py calls for neat-packed rows of a media family
    refuse_family(types.SimpleNamespace(NAME="qwen2_vl"), "padding_free")  # every other family passes


def test_tunekit_train_padding_free_on_images_ends_on_the_padded_runs_weights(vl, demo_dir, tmp_path):
    """``padding_free: true`` through ``tunekit train`` (loader, collator, trainer): 2 SGD steps of full fine-tuning in
    float64 end on the weights of the padded run (the loader turns the language model's own KV cache off: with it,
    transformers builds no mask from packed positions and the samples would attend to each other)."""
    from tests.helpers import padded_and_padding_free_weights
    from tests.tolerances import FLOAT64_WEIGHT_TOL

    moved, diff = padded_and_padding_free_weights(
        vl.dir,
        {
            "template": "qwen2_vl",
            "dataset": "mllm_demo",
            "dataset_dir": str(demo_dir),
            "stage": "sft",
            "do_train": True,
            "image_max_pixels": SMALL,
            "finetuning_type": "full",
            "dtype": "float64",
            "per_device_train_batch_size": 3,
            "max_steps": 2,
            "learning_rate": 1e-2,
            "optim": "sgd",
            "save_strategy": "no",
            "disable_tqdm": True,
            "seed": 0,
            "gradient_checkpointing": False,
            "report_to": "none",
        },
        tmp_path,
    )
    # SGD moves each weight by lr x its gradient; the two runs' float64 gradients differ by summation order only
    # (the bound of test_loss_logits_and_gradients_equal_the_padded_batch),
    # far under FLOAT64_WEIGHT_TOL (tolerances.py)
    assert moved > 1e-4
    assert diff <= FLOAT64_WEIGHT_TOL, (diff, moved)  # measured: 3.5e-18 (weights moved by up to 9.6e-4)


def test_the_dataset_cache_keys_on_the_video_options(vl, demo_dir, tmp_path):
    """A second run with other video options must re-tokenize (the cache reused the first run's video token counts,
    which then disagreed with the grids the collator computes: a crash in get_rope_index, or wrong rows)."""
    pytest.importorskip("av")
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets

    lengths = {}
    for pixels in (SMALL, 4 * SMALL):
        cfg = load_config(
            None,
            {
                "model_name_or_path": str(vl.dir),
                "template": "qwen2_vl",
                "dataset": "mllm_video_demo",
                "dataset_dir": str(demo_dir),
                "output_dir": str(tmp_path / "o"),
                "stage": "sft",
                "video_max_pixels": pixels,
                "video_maxlen": 4,
                "report_to": "none",
            },
        )
        data = prepare_datasets(cfg, vl.tok, "sft")
        lengths[pixels] = [len(r) for r in data.train["input_ids"]]
        feats = [data.train[i] for i in range(len(data.train))]
        assert _free(vl, feats, data.mm)["video_grid_thw"].shape[0] == len(feats)  # grids agree with the cached tokens
    assert all(big > small for small, big in zip(lengths[SMALL], lengths[4 * SMALL])), lengths


def test_tunekit_train_dpo_padding_free_on_images_ends_on_the_padded_runs_weights(vl, demo_dir, tmp_path):
    """dpo with images through ``tunekit train`` (full fine-tuning: a frozen reference copy gets the same row),
    float64, 2 SGD steps: padding-free ends on the padded run's weights (bound as in the sft run above)."""
    from tests.helpers import padded_and_padding_free_weights
    from tests.tolerances import FLOAT64_WEIGHT_TOL

    moved, diff = padded_and_padding_free_weights(
        vl.dir,
        {
            "template": "qwen2_vl",
            "dataset": "toy",
            "dataset_dir": str(_pair_data(tmp_path, demo_dir)),
            "stage": "dpo",
            "do_train": True,
            "image_max_pixels": SMALL,
            "finetuning_type": "full",
            "dtype": "float64",
            "per_device_train_batch_size": 2,
            "max_steps": 2,
            "learning_rate": 1e-1,
            "optim": "sgd",
            "save_strategy": "no",
            "disable_tqdm": True,
            "seed": 0,
            "gradient_checkpointing": False,
            "report_to": "none",
        },
        tmp_path,
    )
    assert moved > 1e-5
    assert diff <= FLOAT64_WEIGHT_TOL, (diff, moved)  # measured: 6.9e-18 (weights moved by up to 1.1e-2)


def test_kto_padding_free_rows_with_images_give_the_padded_log_probs(vl, demo_dir, tmp_path):
    """The examples' row and their mismatched pairs' row each carry every example's images (a pair has the example's
    prompt); per-sequence log-probs of both equal MultimodalKTOCollator's padded rows. (The kto stage itself still
    refuses padding_free with media: stages/kto.py.)"""
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.train.batching import PaddingFreeKTOCollator, sequence_view
    from tunekit.train.stages.kto import MultimodalKTOCollator, with_kl_pairs
    from tunekit.train.stages.reference_policy import forward_logps, media_inputs

    entry = {
        "formatting": "sharegpt",
        "columns": {"messages": "messages", "kto_tag": "label", "images": "images"},
        "tags": SHAREGPT["tags"],
    }
    records = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who is this?"},
                {"role": "assistant", "content": "Harry Kane."},
            ],
            "label": True,
            "images": ["mllm_demo_data/1.jpg"],
        },
        {
            "messages": [
                {"role": "user", "content": "Compare <image> with <image>."},
                {"role": "assistant", "content": "It rains in both."},
            ],
            "label": False,
            "images": ["mllm_demo_data/2.jpg", "mllm_demo_data/3.jpg"],
        },
    ]
    data_dir = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data_dir / "mllm_demo_data")
    write_dataset(data_dir, "toy", records, entry)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(vl.dir),
            "template": "qwen2_vl",
            "dataset": "toy",
            "dataset_dir": str(data_dir),
            "output_dir": str(tmp_path / "o"),
            "stage": "kto",
            "image_max_pixels": SMALL,
            "report_to": "none",
        },
    )
    data = prepare_datasets(cfg, vl.tok, "kto")
    feats = [with_kl_pairs(data.train)[i] for i in range(2)]
    free = PaddingFreeKTOCollator(mm=data.mm, rope_index=rope_index_of(vl.model))(feats)
    padded = MultimodalKTOCollator(pad_token_id=vl.tok.pad_token_id, mm=data.mm)(feats)
    assert free["position_ids"].shape[0] == free["kl_position_ids"].shape[0] == 4
    assert torch.equal(free["kl_image_grid_thw"], free["image_grid_thw"]) and free["image_grid_thw"].shape[0] == 3
    with torch.no_grad():
        for prefix in ("", "kl_"):
            got, n = forward_logps(vl.model, **sequence_view(free, prefix), **media_inputs(free, prefix))
            want, m = forward_logps(vl.model, **sequence_view(padded, prefix), **media_inputs(padded, prefix))
            assert n.tolist() == m.tolist()
            bounds = [
                k * 2 * LOGIT_TOL + sum_order_bound(k, abs(b), FP64_U) for b, k in zip(want.tolist(), m.tolist())
            ]
            assert all(abs(a - b) <= bound for a, b, bound in zip(got.tolist(), want.tolist(), bounds)), (
                prefix,
                got,
                want,
            )
