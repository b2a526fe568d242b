"""The planner on vision-language models: the vision tower and projector counted exactly (weights, trainable
parameters for every freeze combination and LoRA target), their activations against what autograd saves, media
tokens equal to the processor's, the published totals of the built-in shapes, and the Qwen2.5-VL-7B figure."""

from __future__ import annotations

import json

import pytest
import torch

from tests.memory_helpers import measured_cfg, saved_storage_bytes, storage_bytes
from tunekit.config import load_config
from tunekit.model.elementwise_recompute import enable_for_training
from tunekit.model.finetuning import apply_finetuning
from tunekit.model.multimodal import model_class
from tunekit.plan import make_plan
from tunekit.plan.activations import saved_bytes
from tunekit.plan.architectures import load_shape
from tunekit.plan.memory import GiB, estimate_memory
from tunekit.plan.params import count_params
from tunekit.plan.training_setup import resolve_setup
from tunekit.plan.vision import image_grid
from tunekit.plan.vision_memory import count_vision, vision_saved_bytes
from tunekit.train.decisions import decide_features
from tunekit.train.machine import Machine

TEXT = dict(
    hidden_size=48,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=300,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=0,
    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 2, 2]},
)  # head_dim 12
VISION = {  # small, but every width distinct so a wrong term shows
    "qwen2_5_vl": dict(
        depth=2,
        hidden_size=64,
        intermediate_size=96,
        num_heads=4,
        out_hidden_size=48,
        fullatt_block_indexes=[1],
        window_size=56,
        patch_size=14,
    ),
    "qwen2_vl": dict(depth=2, embed_dim=64, mlp_ratio=2, num_heads=4, hidden_size=48, patch_size=14),
    "qwen3_vl": dict(
        depth=2,
        hidden_size=64,
        intermediate_size=96,
        num_heads=4,
        out_hidden_size=48,
        num_position_embeddings=64,
        deepstack_visual_indexes=[0],
        patch_size=16,
    ),
}
TEMPLATE = {"qwen2_5_vl": "qwen2_vl", "qwen2_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl"}
IDS = dict(image_token_id=299, video_token_id=298, vision_start_token_id=297, vision_end_token_id=296)


def _cfg(family: str, **over):
    return measured_cfg(None, 64, template=TEMPLATE[family], **over)  # planned for the device it is measured on


def _build(family: str, cfg, tmp_path):
    """config.json (what the planner reads) and the same model built the way tunekit train builds it."""
    from transformers import AutoConfig

    text = {**TEXT, **({"head_dim": 12} if family == "qwen3_vl" else {})}
    hf = AutoConfig.for_model(family, text_config=text, vision_config=VISION[family], **IDS)
    folder = tmp_path / family
    hf.save_pretrained(folder)
    hf._attn_implementation = "sdpa"
    hf.use_cache = False
    torch.manual_seed(0)
    model = model_class(hf).from_config(hf, dtype=torch.bfloat16 if cfg.bf16 else torch.float32)
    if cfg.use_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_finetuning(model, cfg)
    enable_for_training(model, decide_features(cfg, Machine.cpu()).elementwise_recompute.detail)  # as tunekit train
    model.train()
    return model, folder


FREEZE = [
    dict(freeze_vision_tower=t, freeze_multi_modal_projector=p, freeze_language_model=lm)
    for t in (True, False)
    for p in (True, False)
    for lm in (True, False)
    if not (t and p and lm)
]
STATE_CASES = [("full", f) for f in FREEZE] + [("lora", f) for f in FREEZE]
#: explicit targets that PEFT also finds in the vision tower and projector (it matches the last name component), which
#: reach them only when they are unfrozen (tunekit.model.trainable)
TARGETS = {"qwen2_5_vl": "gate_proj,up_proj,qkv", "qwen2_vl": "q_proj,fc1,qkv", "qwen3_vl": "q_proj,linear_fc1,proj"}


@pytest.mark.parametrize("family", sorted(VISION))
def test_weights_and_trainable_parameters_are_exact(family, tmp_path):
    """Every freeze combination (full and LoRA ``all``) and explicit LoRA targets that reach into the vision tower:
    planned bytes = the real model's storages, trainable count = the requires_grad count."""
    unfrozen = dict(freeze_vision_tower=False, freeze_multi_modal_projector=False)
    for method, opts in STATE_CASES + [("lora", dict(lora_target=TARGETS[family], **unfrozen))]:
        cfg = _cfg(family, finetuning_type=method, bf16=True, **opts)
        model, folder = _build(family, cfg, tmp_path)
        shape = load_shape(str(folder), None)
        setup = resolve_setup(cfg)
        counts = count_params(shape, setup)
        params = list(model.parameters())
        trainable = [p for p in params if p.requires_grad]
        assert counts.trainable == sum(p.numel() for p in trainable), (method, opts)
        est = estimate_memory(shape, setup, counts).components
        assert est["base_weights"] + est["trainable_params"] == storage_bytes(params), (method, opts)
        assert est["trainable_params"] == storage_bytes(trainable), (method, opts)


def _measure_vision(model, cfg, grid) -> tuple[int, int]:
    """Bytes of unique non-parameter storages the vision side keeps for backward, for one image of ``grid``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    vis, vc = base.model.visual, base.config.vision_config
    n = grid[0] * grid[1] * grid[2]
    torch.manual_seed(1)
    pixels = torch.randn(n, 3 * vc.temporal_patch_size * vc.patch_size**2)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            return vis(pixels, grid_thw=torch.tensor([grid]))

    return saved_storage_bytes(model, forward), n


ACT_CASES = [
    dict(finetuning_type="full", freeze_vision_tower=False, freeze_multi_modal_projector=False),
    dict(finetuning_type="full", freeze_vision_tower=False, freeze_multi_modal_projector=False, bf16=True),
    dict(finetuning_type="full", freeze_multi_modal_projector=False, bf16=True),
    dict(finetuning_type="lora", freeze_vision_tower=False, freeze_multi_modal_projector=False, bf16=True),
    dict(finetuning_type="lora", freeze_vision_tower=False, freeze_multi_modal_projector=False),
    dict(
        finetuning_type="full",
        freeze_vision_tower=False,
        freeze_multi_modal_projector=False,
        bf16=True,
        gradient_checkpointing=True,
    ),
]


@pytest.mark.parametrize("family", sorted(VISION))
def test_vision_activations_against_autograd(family, tmp_path):
    """Planned vision saved bytes vs the storages autograd keeps (two image sizes). The tolerance is the text
    layers' 10 % (tests/plan/test_plan_memory.py), except bf16 for the LayerNorm families (Qwen2-VL, Qwen3-VL): CPU
    autocast runs layer_norm in bf16, CUDA autocast (what the planner follows) in fp32 with fp32 statistics, so
    on CPU their norms keep less than on the GPU (measured +10.7 % at most, LoRA): 15 % there."""
    errors = []
    for opts in ACT_CASES:
        cfg = _cfg(family, **opts)
        model, folder = _build(family, cfg, tmp_path)
        shape = load_shape(str(folder), None)
        setup = resolve_setup(cfg)
        counts = count_vision(shape.vision, setup)
        tol = 0.15 if (cfg.bf16 and family != "qwen2_5_vl") else 0.10
        for grid in ((1, 8, 8), (1, 16, 16)):
            measured, patches = _measure_vision(model, cfg, grid)
            est = vision_saved_bytes(shape.vision, setup, counts, patches)
            errors.append((opts, grid, round(est / measured - 1, 4), tol))
    assert all(abs(e) < tol for *_, e, tol in errors), errors


@pytest.mark.parametrize("family", sorted(VISION))
def test_frozen_vision_keeps_nothing(family, tmp_path):
    """The default (tower and projector frozen, LoRA on the language model): the vision forward keeps nothing."""
    cfg = _cfg(family, finetuning_type="lora", bf16=True)
    model, folder = _build(family, cfg, tmp_path)
    shape = load_shape(str(folder), None)
    setup = resolve_setup(cfg)
    assert _measure_vision(model, cfg, (1, 8, 8))[0] == 0
    assert vision_saved_bytes(shape.vision, setup, count_vision(shape.vision, setup), 64) == 0


def test_whole_vlm_forward_within_10_percent(tmp_path):
    """One real VLM forward (an image's tokens inside the text): the language model's planned saved bytes plus the
    vision side's, against autograd, LoRA on the language model and the tower (the text layers' 10 %)."""
    family = "qwen2_5_vl"
    cfg = _cfg(family, finetuning_type="lora", bf16=True, freeze_vision_tower=False)
    model, folder = _build(family, cfg, tmp_path)
    shape = load_shape(str(folder), None)
    grid, seq = (1, 8, 8), 48
    tokens = grid[0] * grid[1] * grid[2] // 4
    ids = torch.randint(0, 290, (1, seq))
    ids[0, 4 : 4 + tokens] = IDS["image_token_id"]
    setup = resolve_setup(cfg, seq_len=seq).with_(padded=False, media_patches=64)
    counts = count_params(shape, setup)
    est = saved_bytes(shape, setup, counts)["total"] + vision_saved_bytes(
        shape.vision, setup, count_vision(shape.vision, setup), 64
    )
    torch.manual_seed(2)
    pixels = torch.randn(64, 3 * 2 * 14 * 14)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(input_ids=ids, labels=ids, pixel_values=pixels, image_grid_thw=torch.tensor([grid])).loss

    measured = saved_storage_bytes(model, forward)
    assert abs(est / measured - 1) < 0.10, (est, measured)


def test_image_tokens_equal_the_processor(tmp_path):
    """Tokens per image from image_min/max_pixels equal what the family's own image processor gives (the ids
    training uses), for sizes that are scaled down, kept and scaled up."""
    from PIL import Image

    from tunekit.data.mm_plugins import load_plugin
    from tunekit.tiny.vlm import build_tiny_vlm

    for like, template in (("qwen2.5-vl", "qwen2_vl"), ("qwen3-vl", "qwen3_vl")):
        folder = tmp_path / like
        build_tiny_vlm(folder, like=like, seed=0)
        cfg = load_config(
            None,
            dict(
                model_name_or_path=str(folder), template=template, image_max_pixels=256 * 256, image_min_pixels=64 * 64
            ),
        )
        plugin = load_plugin(cfg, template)
        shape = load_shape(str(folder), None)
        for w, h in ((640, 480), (200, 120), (30, 50), (256, 256)):
            path = tmp_path / f"{like}-{w}x{h}.png"
            Image.new("RGB", (w, h), (10, 20, 30)).save(path)
            expected = plugin.image_token_counts([str(path)], "test")[0]
            assert image_grid(shape.vision, h, w, cfg.image_min_pixels, cfg.image_max_pixels)[1] == expected, (
                like,
                w,
                h,
            )


def test_builtin_vlm_shapes_have_the_published_sizes():
    """Parameter totals of the published checkpoints (their model cards / safetensors index),
    from config.json alone."""
    published = {
        "qwen2-vl-2b": 2_208_985_600,
        "qwen2.5-vl-7b": 8_292_166_656,
        "qwen3-vl-4b": 4_437_815_808,
        "qwen3-vl-8b": 8_767_123_696,
    }
    for name, total in published.items():
        shape = load_shape(name, None)
        assert shape.total_params + shape.vision.total_params == total, name
    v = load_shape("qwen2.5-vl-7b", None).vision
    assert (v.part_params("tower"), v.part_params("projector"), v.depth, v.hidden, v.patch_size, v.merge) == (
        631_975_680,
        44_574_464,
        32,
        1280,
        14,
        2,
    )


def test_qwen25_vl_7b_lora_1024_image_on_24gb():
    """A user's setup: Qwen2.5-VL-7B, LoRA r8 on every language-model linear, bf16, one 1024x1024 image per
    sample (image_max_pixels 1024², so 1008x1008 after the processor's resize: 5184 patches, 1296 tokens) in
    cutoff_len 2048, micro-batch 1, gradient checkpointing, on a 24 GiB GPU."""
    cfg = load_config(
        None,
        dict(
            model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct",
            template="qwen2_vl",
            finetuning_type="lora",
            lora_rank=8,
            cutoff_len=2048,
            bf16=True,
            image_max_pixels=1024 * 1024,
            gradient_checkpointing=True,
            per_device_train_batch_size=1,
        ),
    )
    plan = make_plan(cfg, model_config="qwen2.5-vl-7b", gpu_memory_gib=24, num_samples=1000, image_size=(1024, 1024))
    assert plan.media["tokens_per_image"] == 1296 and plan.media["patches_per_image"] == 5184
    assert plan.params["total"] == 8_292_166_656
    lm = load_shape("qwen2.5-7b", None)  # the same language model as Qwen2.5-7B: the same adapters
    lora = sum(8 * (lin.in_features + lin.out_features) for lin in lm.linears) * lm.layers
    assert plan.params["trainable"] == lora
    assert plan.memory["base_weights"] == round(2 * (8_292_166_656) / GiB, 3)  # every weight frozen in bf16
    assert plan.fits is True
    no_gc = make_plan(
        cfg.model_copy(update={"gradient_checkpointing": False}),
        model_config="qwen2.5-vl-7b",
        gpu_memory_gib=24,
        num_samples=1000,
        image_size=(1024, 1024),
    )
    assert no_gc.fits is False


def test_media_over_cutoff_is_noted_and_cli_flags(tmp_path, capsys):
    """--images / --image-size reach the plan; media tokens beyond cutoff_len are named in the notes."""
    from tunekit.cli.plan_cmd import main

    cfg_file = tmp_path / "vlm.yaml"
    cfg_file.write_text(
        "model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\ntemplate: qwen2_vl\nfinetuning_type: lora\n"
        "cutoff_len: 1024\nbf16: true\nimage_max_pixels: 1048576\n",
        encoding="utf-8",
    )
    assert (
        main(
            [
                str(cfg_file),
                "--model-config",
                "qwen2.5-vl-7b",
                "--num-samples",
                "10",
                "--images",
                "2",
                "--image-size",
                "1024x1024",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["media"]["media_tokens_per_sample"] == 2 * 1296
    assert any("2592 media tokens per sample alone exceed cutoff_len 1024" in n for n in plan["notes"])


def test_freeze_tuning_a_vlm_trains_the_last_lm_layers_and_the_unfrozen_parts(tmp_path):
    """finetuning_type freeze on a VLM (as in LLaMA-Factory): the language model's last freeze_trainable_layers layers
    train, the vision tower / projector as their freeze_* options say; the plan counts exactly what trains."""
    from tunekit.errors import ConfigError

    for opts in ({}, {"freeze_multi_modal_projector": False}, {"freeze_vision_tower": False}):
        cfg = _cfg("qwen2_5_vl", finetuning_type="freeze", freeze_trainable_layers=1, bf16=True, **opts)
        model, folder = _build("qwen2_5_vl", cfg, tmp_path)
        trained = {n for n, p in model.named_parameters() if p.requires_grad}
        last = f"model.language_model.layers.{TEXT['num_hidden_layers'] - 1}."
        media = {
            "freeze_multi_modal_projector": ("model.visual.merger.",),
            "freeze_vision_tower": ("model.visual.patch_embed.", "model.visual.blocks."),
        }.get(next(iter(opts), ""), ())
        assert trained == {n for n, _ in model.named_parameters() if n.startswith((last, *media))}, opts
        counts = count_params(load_shape(str(folder), None), resolve_setup(cfg))
        assert counts.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad), opts
    with pytest.raises(ConfigError, match="set freeze_language_model: false, or use finetuning_type full"):
        _build("qwen2_5_vl", _cfg("qwen2_5_vl", finetuning_type="freeze", freeze_language_model=True), tmp_path)


def test_video_tokens_from_the_video_options():
    """--videos 1 --video-seconds 3 at video_fps 2: 6 frames of 256x256 (video_max_pixels 256²), scaled up to the video
    processor's 128·28² minimum: 336x336, so 3 temporal patches x 24 x 24 = 1728 patches, 432 tokens."""
    cfg = load_config(
        None,
        dict(
            model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct",
            template="qwen2_vl",
            finetuning_type="lora",
            bf16=True,
            cutoff_len=4096,
            per_device_train_batch_size=2,
        ),
    )
    plan = make_plan(cfg, model_config="qwen2.5-vl-7b", num_samples=10, images=0, videos=1, video_seconds=3)
    media = plan.media
    assert (media["patches_per_video"], media["tokens_per_video"], media["media_tokens_per_sample"]) == (
        1728,
        432,
        432,
    )
    assert media["patches_per_micro_batch"] == 2 * 1728


@pytest.mark.parametrize("like, template", [("llava", "llava"), ("gemma3", "gemma3"), ("qwen2-audio", "qwen2_audio")])
def test_other_families_weights_and_trainable_are_exact(like, template, tmp_path):
    """LLaVA, Gemma 3, Qwen2-Audio: the tower/projector split and trainable counts are exact; their towers' activations
    are modelled (tests/plan/test_plan_vlm_towers.py): no 'not modelled' note, and an unfrozen
    tower adds to the plan's."""
    from transformers import AutoConfig

    from tunekit.tiny.vlm import build_tiny_vlm

    folder = build_tiny_vlm(tmp_path / like, like=like, seed=0)
    shape = load_shape(str(folder), None)
    for opts in (
        dict(finetuning_type="full"),
        dict(finetuning_type="full", freeze_vision_tower=False),
        dict(finetuning_type="lora"),
        dict(finetuning_type="lora", freeze_vision_tower=False, freeze_multi_modal_projector=False),
    ):
        cfg = load_config(None, dict(model_name_or_path=str(folder), template=template, **opts))
        model = apply_finetuning(model_class(AutoConfig.from_pretrained(folder)).from_pretrained(folder), cfg)
        counts = count_params(shape, resolve_setup(cfg))
        assert counts.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad), opts
        assert shape.total_params + shape.vision.total_params + counts.lora == sum(
            p.numel() for p in model.parameters()
        )
    plan = make_plan(load_config(None, dict(model_name_or_path=str(folder), template=template)), num_samples=4)
    assert not any("not modelled" in n for n in plan.notes), plan.notes
    acts = [
        estimate_memory(
            shape,
            resolve_setup(
                load_config(
                    None,
                    dict(
                        model_name_or_path=str(folder),
                        template=template,
                        finetuning_type="full",
                        freeze_vision_tower=frozen,
                    ),
                )
            ).with_(media_patches=shape.vision.positions),
        ).components["activations"]
        for frozen in (True, False)
    ]
    assert acts[1] > acts[0], acts
