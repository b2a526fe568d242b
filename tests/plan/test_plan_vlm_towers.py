"""The planner on the encoder towers that are not Qwen-VL's (LLaVA-1.5 / LLaVA-NeXT's CLIP, Gemma 3's and Idefics3's
SigLIP, Qwen2-Audio's Whisper encoder) and their projectors: planned saved-for-backward bytes against the storages
autograd keeps, nothing kept when they are frozen, and the crops / tiles per image equal to the processor's."""

from __future__ import annotations

import pytest
import torch

from tests.memory_helpers import measured_cfg, saved_storage_bytes
from tunekit.model.finetuning import apply_finetuning
from tunekit.model.multimodal import model_class
from tunekit.plan.architectures import load_shape
from tunekit.plan.training_setup import resolve_setup
from tunekit.plan.vision import image_grid
from tunekit.plan.vision_encoders import crops_per_image, positions_from_tokens
from tunekit.plan.vision_memory import count_vision
from tunekit.plan.vision_towers import tower_saved_bytes

TEMPLATE = {
    "llava": "llava",
    "llava-next": "llava_next",
    "gemma3": "gemma3",
    "idefics3": "smolvlm",
    "smolvlm": "smolvlm",
    "qwen2-audio": "qwen2_audio",
}
#: two sizes per family: images per micro-batch (one crop each), an image's (height, width) for the tiled families
#: (their tiles, from the processor's rule), audios per micro-batch
SIZES = {
    "llava": (1, 2),
    "gemma3": (1, 2),
    "qwen2-audio": (1, 2),
    "llava-next": ((56, 56), (112, 100)),
    "idefics3": ((40, 112), (112, 100)),
    "smolvlm": ((40, 112), (112, 100)),
}
CASES = [
    dict(finetuning_type="full", freeze_vision_tower=False, freeze_multi_modal_projector=False),
    dict(finetuning_type="full", freeze_vision_tower=False, freeze_multi_modal_projector=False, bf16=True),
    dict(finetuning_type="full", freeze_multi_modal_projector=False, bf16=True),
    dict(finetuning_type="full", freeze_vision_tower=False, bf16=True),
    dict(finetuning_type="freeze", freeze_trainable_layers=1, freeze_vision_tower=False, bf16=True),
    dict(finetuning_type="lora", freeze_vision_tower=False, freeze_multi_modal_projector=False),
    dict(finetuning_type="lora", freeze_vision_tower=False, freeze_multi_modal_projector=False, bf16=True),
    dict(
        finetuning_type="full",
        freeze_vision_tower=False,
        freeze_multi_modal_projector=False,
        bf16=True,
        gradient_checkpointing=True,
    ),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tunekit.tiny.vlm import build_tiny_vlm

    root = tmp_path_factory.mktemp("towers")
    return {like: build_tiny_vlm(root / like, like=like, seed=0) for like in TEMPLATE}


def _cfg(like: str, folder, **over):
    return measured_cfg(folder, template=TEMPLATE[like], **over)  # planned for the device it is measured on


def _build(folder, cfg):
    """The model as tunekit train builds it (load dtype, checkpointing, finetuning), in training mode."""
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(folder)
    model = model_class(hf).from_pretrained(
        folder, dtype=torch.bfloat16 if cfg.bf16 else torch.float32, attn_implementation="sdpa"
    )
    if cfg.use_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_finetuning(model, cfg)
    model.train()
    return model


def _features(base, like: str, size, v, folder) -> tuple:
    """``(run, crops)``: the family's own media path (get_image_features, or the audio tower + projector with the
    padding mask its forward builds) for ``size``, and the crops / tiles / audios that makes."""
    c = base.config
    torch.manual_seed(1)
    if like == "qwen2-audio":
        from transformers.masking_utils import create_bidirectional_mask

        ac, n = c.audio_config, size
        x = torch.randn(n, ac.num_mel_bins, 2 * ac.max_source_positions)
        keep = torch.ones(n, ac.max_source_positions, dtype=torch.long)
        keep[:, ac.max_source_positions // 2 :] = 0  # audios of 15 s, padded to 30 s
        mask = create_bidirectional_mask(
            config=base.model.audio_tower.config,
            inputs_embeds=torch.zeros(n, ac.max_source_positions, 1),
            attention_mask=keep,
        )
        return lambda: base.model.multi_modal_projector(
            base.model.audio_tower(x, attention_mask=mask).last_hidden_state
        ), n
    s = c.vision_config.image_size
    if like in ("llava", "gemma3"):
        x = torch.randn(size, 3, s, s)
        return lambda: base.model.get_image_features(pixel_values=x).pooler_output, size
    tiles = crops_per_image(v, *size, str(folder))
    x = torch.randn(1, tiles, 3, s, s)
    if like in ("idefics3", "smolvlm"):
        return lambda: base.model.get_image_features(pixel_values=x).pooler_output, tiles
    return lambda: base.model.get_image_features(pixel_values=x, image_sizes=torch.tensor([size])).pooler_output, tiles


def _measure(model, cfg, like: str, size, v, folder) -> tuple[int, int]:
    """Bytes of the unique non-parameter storages the media path saves for backward, and the crops / audios."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    run, items = _features(base, like, size, v, folder)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            return run()

    return saved_storage_bytes(model, forward), items


@pytest.mark.parametrize("like", sorted(TEMPLATE))
def test_tower_activations_against_autograd(like, folders):
    """Planned saved bytes of the tower and projector vs the storages autograd keeps: full and LoRA with the tower
    unfrozen, fp32 and bf16, the projector alone, the tower alone, freeze-tuning with the tower unfrozen, checkpointed
    layers; two sizes. The tolerance is the text layers'
    10 % (tests/plan/test_plan_memory.py), except LoRA in bf16: there the tower is loaded in bf16, so its residual
    stream is bf16, and CPU autocast runs layer_norm in bf16 where CUDA autocast (what the planner follows) runs it in
    fp32 (an fp32 input copy and fp32 output per norm). On CPU each norm keeps half its planned input and output,
    which the planner counts at up to 2 of the ~16 bytes x width a layer keeps per position (+12 … +14 % measured on
    the SigLIP towers): 15 % there. Elsewhere the residual is fp32 (the trained fp32 position embedding promotes it)
    and both devices agree."""
    folder = folders[like]
    shape = load_shape(str(folder), None)
    errors = []
    for opts in CASES:
        cfg = _cfg(like, folder, **opts)
        model = _build(folder, cfg)
        setup = resolve_setup(cfg)
        counts = count_vision(shape.vision, setup)
        tol = 0.15 if (cfg.bf16 and cfg.finetuning_type == "lora") else 0.10
        for size in SIZES[like]:
            measured, items = _measure(model, cfg, like, size, shape.vision, folder)
            positions = items * shape.vision.positions
            est = tower_saved_bytes(shape.vision, setup, counts, positions)
            errors.append((opts, size, round(est / measured - 1, 4), tol))
    assert all(abs(e) < tol for *_, e, tol in errors), [e for e in errors if abs(e[2]) >= e[3]]


@pytest.mark.parametrize("like", sorted(TEMPLATE))
def test_frozen_tower_keeps_nothing(like, folders):
    """The default (tower and projector frozen, LoRA on the language model): the media path keeps nothing, and the
    plan says so; a whole plan of that default carries no 'not modelled' note."""
    from tunekit.plan import make_plan

    folder = folders[like]
    cfg = _cfg(like, folder, finetuning_type="lora", bf16=True)
    shape = load_shape(str(folder), None)
    setup = resolve_setup(cfg)
    assert _measure(_build(folder, cfg), cfg, like, SIZES[like][0], shape.vision, folder)[0] == 0
    assert tower_saved_bytes(shape.vision, setup, count_vision(shape.vision, setup), shape.vision.positions) == 0
    plan = make_plan(cfg, num_samples=4)
    assert not any("not modelled" in n for n in plan.notes), plan.notes
    assert plan.media["patches_per_micro_batch"] > 0, plan.media


@pytest.mark.parametrize("like", ["llava-next", "idefics3", "smolvlm"])
def test_tiles_per_image_equal_the_processor(like, folders, tmp_path):
    """The planner's tiles per image (the encoder's crops) equal the processor's pixel_values for images that are
    kept, tiled and scaled down, and so do the media tokens an image becomes (the ids ``data/lengths.py`` counts); from
    those tokens (measured data) the tiles come back (LLaVA-NeXT: its largest pinpoint grid, 4 tiles + the base, an
    upper bound: unpadding hides the grid in the token count)."""
    from PIL import Image

    from tunekit.data.mm_plugins import load_plugin

    folder = folders[like]
    cfg = _cfg(like, folder, image_max_pixels=100 * 100, image_min_pixels=20 * 20)
    plugin = load_plugin(cfg, TEMPLATE[like])
    v = load_shape(str(folder), None).vision
    for w, h in ((56, 56), (100, 60), (60, 100), (300, 120), (30, 50)):
        path = tmp_path / f"{like}-{w}x{h}.png"
        Image.new("RGB", (w, h), (10, 20, 30)).save(path)
        pixels = plugin.images([str(path)], "test")["pixel_values"]
        positions, tokens = image_grid(v, h, w, cfg.image_min_pixels, cfg.image_max_pixels, str(folder))
        assert positions == pixels.shape[1] * v.positions, (like, w, h, pixels.shape)
        count = plugin.image_token_counts([str(path)], "test")[0]
        if (
            like != "llava-next"
        ):  # its count is the tile grid (rows x GRID + cols); the media ids of the block it writes
            ids = plugin.processor.tokenizer(plugin.image_block(count), add_special_tokens=False)["input_ids"]
            count = sum(1 for i in ids if i in plugin.media_token_ids())
        assert tokens == count, (like, w, h)
        back = positions_from_tokens(v, tokens, 1)  # measured data: the tiles from the tokens (LLaVA-NeXT: at most)
        assert back == positions if like != "llava-next" else positions <= back == 5 * v.positions, (like, w, h, back)
    assert crops_per_image(v, 56, 56, str(folder)) >= 1


def test_measured_media_become_encoder_positions(folders):
    """With measured data the sample with the most media tokens gives the encoder positions: LLaVA 2 images of 16
    tokens = 2 crops of 17 positions (CLS), an Idefics3 image of 5 tiles (31 media ids) = 5 tiles of 16, a
    Qwen2-Audio audio of 300 tokens = the padded 1,500 positions."""
    from tunekit.plan.vision import measured_media

    def lengths(kind, tokens, count):
        cols = {f"{k}_tokens": [0, 0] for k in ("image", "video", "audio")} | {
            f"{k}s": [0, 0] for k in ("image", "video", "audio")
        }
        return cols | {f"{kind}_tokens": [0, tokens], f"{kind}s": [0, count], "source": ["a.json#0", "a.json#1"]}

    for like, kind, tokens, count, patches in (
        ("llava", "image", 32, 2, 2 * 17),
        ("idefics3", "image", 31, 1, 5 * 16),
        ("qwen2-audio", "audio", 300, 1, 1500),
    ):
        media = measured_media(load_shape(str(folders[like]), None).vision, lengths(kind, tokens, count))
        assert (media.patches, media.tokens) == (patches, tokens), (like, media)
