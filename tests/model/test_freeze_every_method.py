"""Frozen means frozen: every fine-tuning method honours freeze_vision_tower, freeze_multi_modal_projector
and freeze_language_model on every vision-language (and audio-language) family tunekit builds.

For each method x family, the model is loaded as ``tunekit train`` loads it (``load_model``), one batch with the
family's media (a demo image, or audio for Qwen2-Audio) goes through it, and one AdamW step (weight decay on, as the
trainer's) is taken over the parameters that require a gradient: no parameter under a frozen part requires one or
changes, and with the vision tower unfrozen the step does change it (the batch reaches it, so the check can see a
leak). LLaMA-Factory's own ``extras/oft/qwen2_5vl_oft_sft.yaml`` (OFT with the tower and projector frozen) put 12 of
its 26 adapters on ``visual.*`` before.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import write_dataset

#: --like -> template (the family's), media kind of the test record
FAMILIES = {
    "qwen2-vl": "qwen2_vl",
    "qwen2.5-vl": "qwen2_vl",
    "qwen3-vl": "qwen3_vl",
    "llava": "llava",
    "llava-next": "llava_next",
    "gemma3": "gemma3",
    "smolvlm": "smolvlm",
    "qwen2-audio": "qwen2_audio",
}
METHODS = {
    "lora": dict(finetuning_type="lora", lora_rank=4),
    "dora": dict(finetuning_type="lora", lora_rank=4, use_dora=True),
    "pissa": dict(finetuning_type="lora", lora_rank=4, pissa_init=True, pissa_iter=-1),
    "oft": dict(finetuning_type="oft", oft_block_size=8),
    "freeze": dict(finetuning_type="freeze"),
    "full": dict(finetuning_type="full"),
}
#: the defaults (tower and projector frozen), and the tower trained with the language model frozen (freeze-tuning
#: trains language-model layers by definition, so it unfreezes the tower and keeps the projector frozen instead)
SETTINGS = {"defaults": {}, "tower_only": dict(freeze_vision_tower=False, freeze_language_model=True)}
SHAREGPT = {
    "formatting": "sharegpt",
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}


@pytest.fixture(scope="session")
def vlm_folders(tmp_path_factory):
    from tunekit.tiny.vlm import build_tiny_vlm

    root, built = tmp_path_factory.mktemp("freeze-vlms"), {}

    def get(like: str) -> Path:
        if like not in built:
            built[like] = build_tiny_vlm(root / like, like=like, seed=0)
        return built[like]

    return get


def _data(tmp_path: Path, demo_dir: Path, like: str) -> Path:
    data = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data / "mllm_demo_data")
    kind, file, tag = ("audios", "2.wav", "<audio>") if like == "qwen2-audio" else ("images", "1.jpg", "<image>")
    record = {
        "messages": [{"role": "user", "content": f"{tag}What is this?"}, {"role": "assistant", "content": "A test."}],
        kind: [f"mllm_demo_data/{file}"],
    }
    write_dataset(data, "toy", [record], {**SHAREGPT, "columns": {"messages": "messages", kind: kind}})
    return data


def _one_step(cfg):
    """The model as training loads it, one batch of the dataset, one AdamW step; returns (model, parameters before)."""
    import torch

    from tunekit.data.collator import MultimodalCollator
    from tunekit.data.padding_free import rope_index_of
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer

    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, "sft")
    torch.manual_seed(0)
    model = load_model(cfg, tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    collator = MultimodalCollator(
        pad_token_id=tokenizer.pad_token_id,
        pad_to_multiple_of=cfg.pad_to_multiple_of,
        label_pad_id=-100,
        mm=data.mm,
        rope_index=rope_index_of(model),
    )
    batch = collator([data.train[0]])
    model.train()
    loss = model(**batch).loss
    loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.1)
    optimizer.step()
    return model, before


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("like", sorted(FAMILIES))
def test_no_method_trains_or_moves_a_frozen_part(like, method, setting, vlm_folders, demo_dir, tmp_path):
    import torch

    from tunekit.config import load_config
    from tunekit.model.trainable import base_name, frozen_parts, model_parts, under

    opts = dict(SETTINGS[setting])
    if method == "freeze" and setting == "tower_only":
        opts = dict(freeze_vision_tower=False)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(vlm_folders(like)),
            "template": FAMILIES[like],
            "dataset": "toy",
            "dataset_dir": str(_data(tmp_path, demo_dir, like)),
            "output_dir": str(tmp_path / "out"),
            "stage": "sft",
            "cutoff_len": 1024,
            "report_to": "none",
            **METHODS[method],
            **opts,
        },
    )
    model, before = _one_step(cfg)
    parts, frozen = model_parts(model, cfg), frozen_parts(model, cfg)
    assert set(frozen.values()) == {
        o
        for o, on in (
            ("freeze_vision_tower", cfg.freeze_vision_tower),
            ("freeze_multi_modal_projector", cfg.freeze_multi_modal_projector),
            ("freeze_language_model", cfg.freeze_language_model),
        )
        if on
    }
    params = dict(model.named_parameters())
    in_frozen = [n for n in params if under(base_name(n), frozen)]
    assert in_frozen  # every frozen part has parameters
    assert [n for n in in_frozen if params[n].requires_grad] == []
    assert [n for n in in_frozen if not torch.equal(params[n], before[n])] == []
    reached = {n for n, p in params.items() if p.grad is not None and p.grad.abs().max() > 0}
    assert reached and all(not torch.equal(params[n], before[n]) for n in reached)  # the step was real
    if not cfg.freeze_vision_tower:  # the batch's gradient reaches the tower: a leak there would show
        assert any(under(base_name(n), parts["freeze_vision_tower"]) for n in reached)


def _load(folder: Path, template: str, tmp_path: Path, **opts):
    from tunekit.config import load_config
    from tunekit.model.loader import load_model, load_tokenizer

    cfg = load_config(
        None, {"model_name_or_path": str(folder), "template": template, "output_dir": str(tmp_path / "o"), **opts}
    )
    return load_model(cfg, load_tokenizer(cfg))


@pytest.mark.parametrize("method", ["lora", "oft"])
def test_explicit_targets_skip_frozen_parts_and_name_the_option_when_only_frozen_parts_have_them(
    method, vlm_folders, tmp_path
):
    """LLaVA's CLIP tower has q_proj / v_proj too: an explicit list adapts them only when the tower is unfrozen."""
    from tunekit.errors import ConfigError

    folder, extra = vlm_folders("llava"), dict(oft_block_size=8) if method == "oft" else {}
    target = f"{method}_target"

    def adapted(**opts):
        model = _load(folder, "llava", tmp_path, finetuning_type=method, **{target: "q_proj,v_proj"}, **extra, **opts)
        marker = ".lora_A." if method == "lora" else ".oft_R."
        return {
            n.split(marker)[0].replace("base_model.model.", "") for n, _ in model.named_parameters() if marker in n
        }

    def attention(prefix: str) -> set[str]:
        return {f"{prefix}.layers.{i}.self_attn.{m}" for i in range(2) for m in ("q_proj", "v_proj")}

    assert adapted() == attention("model.language_model")
    assert adapted(freeze_vision_tower=False) == attention("model.language_model") | attention(
        "model.vision_tower.encoder"
    )
    with pytest.raises(
        ConfigError,
        match=f"^{target} names fc1, which only frozen parts have \\(freeze_vision_tower: "
        f"true\\): remove it from {target}, or unfreeze that part.$",
    ):
        _load(folder, "llava", tmp_path, finetuning_type=method, **{target: "q_proj,fc1"}, **extra)


def test_additional_target_inside_a_frozen_part_is_refused(vlm_folders, tmp_path):
    from tunekit.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match="^additional_target names multi_modal_projector, which lies in a frozen part "
        "\\(freeze_multi_modal_projector: true: e.g. model.multi_modal_projector\\)",
    ):
        _load(
            vlm_folders("llava"), "llava", tmp_path, finetuning_type="lora", additional_target="multi_modal_projector"
        )


#: LLaMA-Factory's examples/extras/oft/qwen2_5vl_oft_sft.yaml @ 8efebab, verbatim
QWEN2_5VL_OFT = """\
### model
model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct
image_max_pixels: 262144
video_max_pixels: 16384
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: oft
oft_block_size: 32
oft_target: all

### dataset
dataset: mllm_demo,identity,alpaca_en_demo  # video: mllm_video_demo
template: qwen2_vl
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
dataloader_num_workers: 4

### output
output_dir: saves/qwen2_5vl-7b/oft/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none  # choices: [none, wandb, tensorboard, swanlab, mlflow]

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
resume_from_checkpoint: null
"""


def test_llamafactory_qwen2_5vl_oft_example_adapts_only_the_language_model(vlm_folders, demo_dir, tmp_path):
    """The example leaves freeze_vision_tower / freeze_multi_modal_projector at true; OFT used to put 12 of its 26
    adapters on visual.* all the same (peft's all-linear) while tunekit_config.yaml said the tower was frozen."""
    import json
    import re

    import yaml
    from safetensors import safe_open

    from tunekit.config import load_config
    from tunekit.flow import run_train

    out = tmp_path / "out"
    text = re.sub(
        r"^model_name_or_path: .*$", f"model_name_or_path: {vlm_folders('qwen2.5-vl')}", QWEN2_5VL_OFT, flags=re.M
    )
    text = re.sub(r"^output_dir: .*$", f"output_dir: {out}", text, flags=re.M)
    text = re.sub(r"^(dataset: .*)$", rf"\1\ndataset_dir: {demo_dir}", text, flags=re.M) + "max_steps: 1\n"
    path = tmp_path / "example.yaml"
    path.write_text(text, encoding="utf-8")
    run_train(load_config(path), str(path))
    written = yaml.safe_load((out / "tunekit_config.yaml").read_text())
    assert (written["freeze_vision_tower"], written["freeze_multi_modal_projector"]) == (True, True)
    targets = json.loads((out / "adapter_config.json").read_text())["target_modules"]
    with safe_open(str(out / "adapter_model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    lm = [
        f"model.language_model.layers.{i}.{m}"
        for i in range(2)
        for m in (
            "mlp.down_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "self_attn.k_proj",
            "self_attn.o_proj",
            "self_attn.q_proj",
            "self_attn.v_proj",
        )
    ]
    assert sorted(targets) == sorted(lm)
    assert len(keys) == 14 and not [k for k in keys if "visual" in k]


def test_oft_on_a_vlm_is_planned_exactly_when_only_the_language_model_adapts(vlm_folders, tmp_path):
    """The planner counted no OFT on a VLM (refused, so gradient_checkpointing: auto could not decide and the example
    above stopped); with the tower and projector frozen OFT adapts the language model only, which it plans exactly."""
    from tunekit.config import load_config
    from tunekit.errors import ConfigError
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup

    folder = vlm_folders("qwen2.5-vl")
    cfg = load_config(
        None,
        {"model_name_or_path": str(folder), "template": "qwen2_vl", "finetuning_type": "oft", "oft_block_size": 32},
    )
    model = load_model(cfg, load_tokenizer(cfg))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count_params(load_shape(str(folder), None), resolve_setup(cfg)).trainable == trainable > 0
    with pytest.raises(
        ConfigError,
        match="^finetuning_type oft is planned for the language model of the vision-language model .* only",
    ):
        count_params(
            load_shape(str(folder), None), resolve_setup(cfg.model_copy(update={"freeze_vision_tower": False}))
        )
