"""A vision-language model under the sharding engines, DeepSpeed ZeRO-3 and tunekit's FSDP2, on 2 CPU ranks.

Full fine-tuning of the tiny Qwen2-VL on images (vision tower frozen, projector and language model trained) for 3
steps with per-device batch 1 on 2 ranks equals one process with batch 2: every optimizer step sees the same two
samples. ZeRO-3 partitions the frozen vision tower too and gathers it in each rank's forward; FSDP2 wraps the
language model's decoder layers and the model root (the vision tower and projector stay in the root's unit). Tolerances
as tests/distributed/test_distributed_engines.py: losses within ``loss_tolerance`` (float32, two summation orders),
weights as ``assert_trained_alike``.

LoRA under the sharding engines: the language model's adapters under ZeRO-3 and FSDP2, and the
vision tower's too (``freeze_vision_tower: false``) under ZeRO-3, 3 steps: losses as above, the saved adapter equals
the one-process adapter (lora_B measured from its zero start) and loads in plain peft onto the base with the same
logits on an image prompt.

Launches: the ZeRO-3 full fine-tuning run starts as users start it (tunekit's re-exec under torchrun, its message
checked); the other four 2-rank runs have no assertion about their launcher and start in one batch
(tests/distributed_helpers.run_cache: each run a fresh 2-rank process, outputs bit-equal to a launch of its own).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.distributed_helpers import assert_close, assert_trained_alike, run_cache, series
from tests.helpers import REFERENCE_DATA, write_dataset
from tests.tolerances import loss_tolerance

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

DEMO_DIR = REFERENCE_DATA
TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
ENTRY = {"formatting": "sharegpt", "columns": {"messages": "messages", "images": "images"}, "tags": TAGS}
RECORDS = [
    {
        "messages": [{"role": "user", "content": "<image>Who is this?"}, {"role": "assistant", "content": "Kane."}],
        "images": ["mllm_demo_data/1.jpg"],
    },
    {
        "messages": [
            {"role": "user", "content": "Describe <image> please"},
            {"role": "assistant", "content": "A speech."},
        ],
        "images": ["mllm_demo_data/2.jpg"],
    },
    {
        "messages": [{"role": "user", "content": "What is in <image>?"}, {"role": "assistant", "content": "Players."}],
        "images": ["mllm_demo_data/3.jpg"],
    },
] * 2
LR, STEPS = 1e-3, 3
# float32: a step's loss is a mean over <= 2 x ~40 trained and image-free tokens of <= ~8 nats (ln of the vocabulary
# 1856), summed in two orders: loss_tolerance(80, 8)
LOSS_TOL = loss_tolerance(80, 8.0)
COMMON = dict(
    template="qwen2_vl",
    cutoff_len=1024,
    image_max_pixels=28 * 28 * 16,
    finetuning_type="full",
    freeze_multi_modal_projector=False,
    max_steps=STEPS,
    learning_rate=LR,
    gradient_checkpointing=False,
    overwrite_output_dir=True,
)


# ------------------------------------------------------------------ the 2-rank runs
# LoRA on the VLM at lr 1e-2 (as tests/distributed/test_distributed_engines.py). "language": adapters on the language
# model only (the defaults: tower and projector frozen); "tower": freeze_vision_tower false, so ``lora_target: all``
# also adapts the tower's and the projector's linear layers (COMMON trains the projector), which ZeRO-3 partitions and
# gathers in each rank's vision forward (run under ZeRO-3 only, to keep the suite's time: measured with FSDP2 too,
# where the tower's adapters shard in the root's unit, it passed alike). Measured (3 steps, 2 ranks vs one process):
# adapters <= 1.2e-5 apart (<= 2.3e-6 of the training update), reloaded logits <= 3e-7.
LORA = dict(finetuning_type="lora", learning_rate=1e-2)
LORA_CASES = {"language": {"freeze_multi_modal_projector": True}, "tower": {"freeze_vision_tower": False}}
# Reloaded adapter logits, 2 ranks vs one process: as tests/distributed/test_distributed_engines.py, and under a tenth
# of what the 3 training steps changed (asserted below).
LOGIT_TOL = 1e-3

# The 2-rank runs (per-device batch 1), by name: full fine-tuning under each engine (ZeRO-3 also keeps its sharded
# checkpoint of the last step: `tunekit zero` must rebuild the VLM from it) and LoRA per engine and case.
ENGINES = {"deepspeed": {"deepspeed": "z3"}, "fsdp": {"fsdp": "full_shard"}}
SHARDED = {
    "deepspeed": dict(per_device_train_batch_size=1, deepspeed="z3", save_strategy="steps", save_steps=STEPS),
    "fsdp": dict(per_device_train_batch_size=1, fsdp="full_shard"),
    **{
        f"{name}_lora_{case}": dict(per_device_train_batch_size=1, **ENGINES[name], **LORA, **LORA_CASES[case])
        for name, case in (("deepspeed", "language"), ("fsdp", "language"), ("deepspeed", "tower"))
    },
}
LAUNCHED = "deepspeed"  # the module's one real launch; the other runs of SHARDED start in one batch


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl-dist") / "model", like="qwen2-vl", seed=0)


@pytest.fixture(scope="module")
def runs(tiny_vlm, tmp_path_factory):
    if not (DEMO_DIR / "mllm_demo_data").is_dir():
        pytest.skip(f"reference data not found at {DEMO_DIR}")
    data = tmp_path_factory.mktemp("vlm-dist-data")
    shutil.copytree(DEMO_DIR / "mllm_demo_data", data / "mllm_demo_data")
    write_dataset(data, "toy", RECORDS, ENTRY)
    batch = {name: options for name, options in SHARDED.items() if name != LAUNCHED}
    return run_cache(tiny_vlm, data, tmp_path_factory.mktemp("vlm-dist"), COMMON, (batch,))


def _sharded(runs, name: str):
    """The 2-rank run ``name`` of SHARDED: the real launch (tunekit's re-exec under torchrun, whose message is checked)
    or a run of the batch."""
    if name != LAUNCHED:
        return runs(name, "batch")
    out, proc = runs(name, "reexec", **SHARDED[name])
    assert "tunekit: starting 2 processes with torchrun" in proc.stderr
    return out, proc


def _trained_alike(single: Path, other: Path, init: Path) -> None:
    """Compared as plain transformers loads each folder (a ZeRO-3 folder keeps the in-memory names:
    train/checkpoint_weights.py); names as the model holds them."""
    from transformers import AutoModelForImageTextToText

    a, b, start = (AutoModelForImageTextToText.from_pretrained(p).state_dict() for p in (single, other, init))
    assert_trained_alike(a, b, LR, STEPS, start, other.name)
    moved = {k for k in a if not a[k].equal(start[k])}
    assert any(k.startswith("model.visual.merger.") for k in moved)
    assert not any(k.startswith(("model.visual.blocks.", "model.visual.patch_embed.")) for k in moved)


@pytest.mark.parametrize("engine", list(ENGINES.values()), ids=["zero3", "fsdp2"])
def test_a_vlm_trains_under_a_sharding_engine_as_in_one_process(runs, tiny_vlm, engine):
    single, _ = runs("single", "inprocess", per_device_train_batch_size=2)
    name = next(iter(engine))
    out, _ = _sharded(runs, name)
    assert_close(series(single), series(out), LOSS_TOL, f"{name} losses")
    _trained_alike(single, out, tiny_vlm)
    if "save_steps" in SHARDED[name]:
        _consolidated_equals_the_saved_folder(out / f"checkpoint-{STEPS}", out)


def _consolidated_equals_the_saved_folder(checkpoint: Path, saved: Path) -> None:
    """The ZeRO shards consolidate (export/zero.py) into the VLM's own class, weight for weight the gathered folder."""
    from transformers import AutoModelForImageTextToText

    from tunekit.export.zero import consolidate_zero, zero_tag

    assert zero_tag(checkpoint) is not None, sorted(p.name for p in checkpoint.iterdir())
    merged = consolidate_zero(checkpoint, checkpoint.parent / "consolidated")
    a, b = (AutoModelForImageTextToText.from_pretrained(p).state_dict() for p in (merged, saved))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)  # the same fp32 bytes, gathered two ways


@pytest.mark.parametrize(
    "engine, words", [({"deepspeed": "z3"}, "deepspeed z3"), ({"fsdp": "full_shard"}, "fsdp full_shard")]
)
def test_text_only_samples_under_zero3_or_fsdp_are_refused_by_name(tiny_vlm, tmp_path, monkeypatch, engine, words):
    """A text-only micro-batch on one rank and an image on another crashed ZeRO-3 (train/engines/media_ranks.py)."""
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.errors import ConfigError
    from tunekit.model.loader import load_tokenizer
    from tunekit.train.engines.distributed import world_size
    from tunekit.train.engines.media_ranks import check_media_on_every_rank

    if not (DEMO_DIR / "mllm_demo_data").is_dir():
        pytest.skip(f"reference data not found at {DEMO_DIR}")
    data_dir = tmp_path / "data"
    shutil.copytree(DEMO_DIR / "mllm_demo_data", data_dir / "mllm_demo_data")
    text = {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."}]}
    write_dataset(data_dir, "toy", [RECORDS[0], text, RECORDS[1]], ENTRY)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NPROC_PER_NODE", "2")
    monkeypatch.setenv("FORCE_TORCHRUN", "1")
    opts = {k: v for k, v in COMMON.items() if k != "overwrite_output_dir"}
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(tiny_vlm),
            "dataset": "toy",
            "dataset_dir": str(data_dir),
            "output_dir": str(tmp_path / "out"),
            **opts,
            **engine,
        },
    )
    assert world_size(cfg) == 2
    data = prepare_datasets(cfg, load_tokenizer(cfg), "sft")
    with pytest.raises(ConfigError) as err:
        check_media_on_every_rank(cfg, data)
    assert str(err.value) == (
        f"{words} with a vision-language model on 2 ranks: 1 of 3 training samples have no image, video or audio. "
        "These "
        f"engines gather the vision tower's weights only on the ranks whose micro-batch has media, so the ranks would "
        f"wait on each other. Give every sample its media, train the text-only samples in a separate run, or use "
        "deepspeed: z2 with the vision tower and projector frozen (or DDP / one process), which keep whole weights "
        "on "
        f"every rank."
    )
    z2 = cfg.model_copy(update={"deepspeed": "z2", "fsdp": None})  # COMMON trains the projector
    with pytest.raises(ConfigError) as err:
        check_media_on_every_rank(z2, data)
    assert str(err.value) == (
        "deepspeed z2 with a vision-language model on 2 ranks: 1 of 3 training samples have no image, video or audio, "
        "and "
        "the vision tower or projector trains: a rank without media has no gradient for them and the ranks' gradient "
        "reductions would not match. Give every sample its media, set freeze_vision_tower and "
        "freeze_multi_modal_projector to true, or train without deepspeed (DDP)."
    )
    check_media_on_every_rank(z2.model_copy(update={"freeze_multi_modal_projector": True}), data)  # frozen: no refusal
    check_media_on_every_rank(cfg.model_copy(update={"deepspeed": None, "fsdp": None}), data)  # DDP: no refusal


# ------------------------------------------------------------------ LoRA on the VLM
def _image_inputs(model_dir: Path) -> dict:
    """A prompt with one demo image for Qwen2-VL from plain transformers: its image processor, and as many image pads
    as ``Qwen2VLProcessor`` expands (``image_grid_thw.prod() // merge_size**2``), which transformers cannot build here
    without torchvision (tests/export/test_vlm_export.py)."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer

    tokenizer, images = AutoTokenizer.from_pretrained(model_dir), AutoImageProcessor.from_pretrained(model_dir)
    pixels = images(
        images=[Image.open(DEMO_DIR / "mllm_demo_data" / "2.jpg").convert("RGB")],
        return_tensors="pt",
        max_pixels=COMMON["image_max_pixels"],
    )
    pads = int(pixels["image_grid_thw"][0].prod()) // images.merge_size**2
    ids = tokenizer(f"<|vision_start|>{'<|image_pad|>' * pads}<|vision_end|>Who is this?", return_tensors="pt")
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    return {**ids, **pixels, "mm_token_type_ids": (ids["input_ids"] == image_pad).long()}


def _adapter_logits(base: Path, adapter: Path | None, inputs: dict):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(base)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter)
    with torch.no_grad():
        return model.eval()(**inputs).logits


@pytest.mark.parametrize(
    "engine, case",
    [({"deepspeed": "z3"}, "language"), ({"fsdp": "full_shard"}, "language"), ({"deepspeed": "z3"}, "tower")],
    ids=["zero3-language", "fsdp2-language", "zero3-tower"],
)
def test_lora_on_a_vlm_under_a_sharding_engine_saves_the_one_process_adapter(runs, tiny_vlm, engine, case):
    import torch

    name = next(iter(engine))
    opts = {**LORA, **LORA_CASES[case]}
    single, _ = runs(f"single_lora_{case}", "inprocess", per_device_train_batch_size=2, **opts)
    out, proc = _sharded(runs, f"{name}_lora_{case}")
    assert_close(series(single), series(out), LOSS_TOL, f"LoRA {case} {name} losses")
    a, b = load_file(single / "adapter_model.safetensors"), load_file(out / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(t.numel() > 0 for t in b.values())  # gathered, not a rank's partition
    assert not (out / "model.safetensors").exists()
    towered = {k for k in b if ".visual.blocks." in k}
    assert (bool(towered), all(".language_model." in k for k in b)) == (
        (True, False) if case == "tower" else (False, True)
    )
    base = sum(t.numel() for t in load_file(tiny_vlm / "model.safetensors").values())
    adapter = sum(t.numel() for t in b.values())
    assert f"trainable params: {adapter:,} / {base + adapter:,}" in proc.stdout  # full sizes, not shards
    # lora_B starts at zero: the runs must stay a small share of its update, over all adapters and over the tower's
    # alone (a tower that got no gradient on the ranks keeps B at zero, within adam_drift of a trained one)
    start = {k: torch.zeros_like(v) for k, v in a.items() if ".lora_B." in k}
    for part, keys in (("all", set(a)), ("tower", towered)):
        if keys:
            assert_trained_alike(
                {k: a[k] for k in keys},
                {k: b[k] for k in keys},
                LORA["learning_rate"],
                STEPS,
                {k: v for k, v in start.items() if k in keys},
                f"LoRA {case} {name} {part}",
            )
    inputs = _image_inputs(tiny_vlm)
    got, want = _adapter_logits(tiny_vlm, out, inputs), _adapter_logits(tiny_vlm, single, inputs)
    assert float((want - _adapter_logits(tiny_vlm, None, inputs)).abs().max()) > 10 * LOGIT_TOL  # the adapter trained
    print(f"LoRA {case} {name}: reloaded logits differ by {float((got - want).abs().max()):.3g}")
    assert float((got - want).abs().max()) <= LOGIT_TOL
