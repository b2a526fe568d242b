"""P-Tuning v2 / prompt tuning in the stages where they make sense (pt, dpo, kto, rm with a prefix), the combinations
refused by name with the reason, and a run resumed from a checkpoint that ends bit-identical to the uninterrupted
one (the prefix MLP of prefix_projection included)."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from tests.helpers import alpaca_records, base_config, train_rows, write_dataset
from tests.stage_helpers import write_kto, write_preference
from tunekit.config import load_config
from tunekit.errors import ConfigError, ModelError

PREFIX = "P-Tuning v2 is supported for sft, pt, dpo, kto and rm"
CHECKPOINTING_WHY = (
    "its prefix reaches every layer's attention as a KV cache, which transformers' checkpointed decoder layers drop "
    "(a layer replayed in backward would write its keys into the cache again), and peft refuses prefix tuning on a "
    "checkpointed model"
)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"pre_seq_len": 16},
            "pre_seq_len is a P-Tuning v2 option but finetuning_type is 'lora': set finetuning_type: ptuning or "
            "remove it.",
        ),
        (
            {"finetuning_type": "ptuning", "num_virtual_tokens": 8},
            "num_virtual_tokens is a prompt tuning option but finetuning_type is 'ptuning': set finetuning_type: "
            "prompt or remove it.",
        ),
        (
            {"finetuning_type": "ptuning", "prefix_hidden_size": 32},
            "prefix_hidden_size only takes effect with prefix_projection: true: set prefix_projection: true or "
            "remove it.",
        ),
        (
            {"finetuning_type": "ptuning", "stage": "ppo", "reward_model": "rm"},
            "stage ppo with finetuning_type ptuning: ppo samples rollouts with the policy and trains a critic beside "
            f"it, which tunekit does for weight methods only ({PREFIX}); use finetuning_type lora for ppo.",
        ),
        (
            {"finetuning_type": "prompt", "stage": "grpo", "reward_funcs": "accuracy"},
            "stage grpo with finetuning_type prompt: grpo samples rollouts with the policy, which tunekit does for "
            "weight methods only (prompt tuning is supported for sft and pt); use finetuning_type lora for grpo.",
        ),
        (
            {"finetuning_type": "prompt", "stage": "kto"},
            "stage kto with finetuning_type prompt: prompt tuning puts num_virtual_tokens trained positions before "
            "every sequence, and kto reads sequence log-probs at the sequence's own positions; use finetuning_type "
            "ptuning (its prefix adds no positions) or lora.",
        ),
        (
            {"finetuning_type": "ptuning", "neat_packing": True, "packing": True},
            "neat_packing with finetuning_type ptuning: P-Tuning v2 gives every row one prefix, and peft does not "
            "keep the samples of a packed row apart (it shifts their position ids); set neat_packing: false.",
        ),
        (
            {"finetuning_type": "prompt", "use_badam": True},
            "use_badam with finetuning_type prompt: it trains the decoder layers block by block, and prompt tuning "
            "trains none of them (only its virtual tokens); remove use_badam.",
        ),
        (
            {"finetuning_type": "ptuning", "gradient_checkpointing": True},
            "gradient_checkpointing: true with finetuning_type ptuning: P-Tuning v2 trains without gradient "
            f"checkpointing ({CHECKPOINTING_WHY}); remove gradient_checkpointing (auto is off for ptuning) or set it "
            "false. For less activation memory lower per_device_train_batch_size or cutoff_len, or use "
            "finetuning_type lora.",
        ),
        (
            {"finetuning_type": "ptuning", "gradient_checkpointing_layers": 1},
            "gradient_checkpointing_layers with finetuning_type ptuning: P-Tuning v2 trains without gradient "
            f"checkpointing ({CHECKPOINTING_WHY}), so no layer is checkpointed; remove gradient_checkpointing_layers.",
        ),
        (
            {"finetuning_type": "ptuning", "quantization_bit": 4},
            "quantization_bit 4 trains a quantized base, which only works with LoRA (QLoRA) or OFT (QOFT): set "
            "finetuning_type: lora or oft, or remove quantization_bit.",
        ),
    ],
)
def test_what_ptuning_and_prompt_cannot_do_is_refused_by_name(values, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, values)
    assert str(err.value) == message


def _run(model_dir, data_dir, out, **options) -> dict:
    from tunekit.flow import run_train

    return run_train(load_config(None, base_config(model_dir, data_dir, out, **options)))


def _adapter_kind(out) -> str:
    return json.loads((out / "adapter_config.json").read_text())["peft_type"]


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        (dict(finetuning_type="ptuning", pre_seq_len=4), "PREFIX_TUNING"),
        (dict(finetuning_type="prompt"), "PROMPT_TUNING"),
    ],
)
def test_pt_trains_the_prefix_or_prompt_on_packed_text(options, kind, tiny_qwen, tmp_path):
    data = tmp_path / "data"
    texts = [{"text": f"{r['instruction']} {r['output']}. " * 4} for r in alpaca_records(16)]
    write_dataset(data, "texts", texts, entry={"columns": {"prompt": "text"}})
    out = tmp_path / "pt"
    _run(tiny_qwen, data, out, stage="pt", dataset="texts", max_steps=4, learning_rate=1e-2, **options)
    rows = train_rows(out)
    assert len(rows) == 4 and all(math.isfinite(r["loss"]) for r in rows)
    assert _adapter_kind(out) == kind


@pytest.mark.parametrize("stage", ["dpo", "kto"])
def test_preference_stages_train_the_prefix_against_the_base(stage, tiny_qwen, tmp_path):
    """The reference is the model without the prefix (a frozen copy of the base, as for full / freeze), so the policy
    moves away from it: the trained prefix raises the chosen (desirable) rewards above the rejected."""
    data = tmp_path / "data"
    (write_kto if stage == "kto" else write_preference)(data, "toy", n=16, seed=0)
    out = tmp_path / stage
    _run(tiny_qwen, data, out, stage=stage, finetuning_type="ptuning", pre_seq_len=4, max_steps=6, learning_rate=2e-2)
    rows = train_rows(out)
    assert len(rows) == 6 and all(math.isfinite(r["loss"]) for r in rows)
    assert sum(r["loss"] for r in rows[-2:]) < sum(r["loss"] for r in rows[:2]), rows
    assert _adapter_kind(out) == "PREFIX_TUNING"


def test_a_reward_model_with_a_prefix_saves_and_reloads_its_scores(tiny_qwen, tmp_path):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer
    from tunekit.train.batching import PairCollator
    from tunekit.train.stages.value_head import load_value_head_model

    data = tmp_path / "data"
    write_preference(data, "toy", n=16, seed=0)
    out = tmp_path / "rm"
    _run(tiny_qwen, data, out, stage="rm", finetuning_type="ptuning", pre_seq_len=4, max_steps=4)
    assert _adapter_kind(out) == "PREFIX_TUNING" and (out / "value_head.safetensors").is_file()
    model = load_value_head_model(out)  # the prefix stays a PeftModel (nothing to merge)
    cfg = load_config(None, base_config(tiny_qwen, data, tmp_path / "x", stage="rm"))
    tokenizer = load_tokenizer(cfg)
    rows = prepare_datasets(cfg, tokenizer, "rm").train
    batch = PairCollator(tokenizer.pad_token_id)([rows[i] for i in range(4)])
    with torch.no_grad():
        scores = model.score(batch["input_ids"], batch["attention_mask"])
        with model.pretrained_model.disable_adapter():
            without = model.score(batch["input_ids"], batch["attention_mask"])
    assert torch.isfinite(scores).all() and not torch.equal(scores, without)


@pytest.mark.parametrize(
    "options",
    [
        dict(finetuning_type="ptuning", pre_seq_len=3, prefix_projection=True, prefix_hidden_size=16),
        dict(finetuning_type="prompt", num_virtual_tokens=4),
    ],
    ids=["ptuning-projected", "prompt"],
)
def test_a_resumed_run_ends_bit_identical_to_the_uninterrupted_one(options, tiny_qwen, tmp_path, monkeypatch):
    """Killed after checkpoint-2 and resumed (the trainer loads checkpoint-2: recorded): the same losses for steps 3-4
    and the same final adapter bits. With prefix_projection the checkpoint's adapter holds only the projected prefix;
    the MLP resumes from prefix_encoder.safetensors, which tunekit's checkpoint code writes beside it
    (train/checkpoint_weights.py)."""
    from safetensors.torch import load_file

    from tunekit.train import checkpoint_weights
    from tunekit.train.checkpoint_weights import CheckpointWeightsMixin
    from tunekit.train.checkpoints import write_complete_marker

    loaded, load, read = [], CheckpointWeightsMixin._load_from_checkpoint, checkpoint_weights.load_prefix_encoder

    def recorded_load(self, folder, model=None):
        loaded.append(folder.rsplit("/", 1)[-1])
        return load(self, folder, model)

    def recorded_read(model, folder):
        found = read(model, folder)
        loaded.extend(["encoder"] if found else [])
        return found

    monkeypatch.setattr(CheckpointWeightsMixin, "_load_from_checkpoint", recorded_load)
    monkeypatch.setattr(checkpoint_weights, "load_prefix_encoder", recorded_read)

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(32))
    common = dict(options, learning_rate=1e-2, max_steps=4, save_strategy="steps", save_steps=2)
    _run(tiny_qwen, data, tmp_path / "full", **common)
    projected = "prefix_projection" in options
    assert (tmp_path / "full" / "checkpoint-2" / "prefix_encoder.safetensors").is_file() is projected
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")  # as if killed after checkpoint-2 was written
    shutil.rmtree(tmp_path / "resumed" / "checkpoint-4")
    final = ("adapter_model.safetensors", "adapter_config.json", "prefix_encoder.safetensors", "all_results.json")
    for name in (*final, "train_results.json"):
        (tmp_path / "resumed" / name).unlink(missing_ok=True)
    assert loaded == []
    _run(tiny_qwen, data, tmp_path / "resumed", resume_from_checkpoint=True, **common)
    assert loaded == ["checkpoint-2"] + (["encoder"] if projected else [])
    full, resumed = ({r["step"]: r["loss"] for r in train_rows(tmp_path / run)} for run in ("full", "resumed"))
    assert full == resumed and sorted(full) == [1, 2, 3, 4]  # a step logged again: the last value counts
    names = ["adapter_model.safetensors"] + (["prefix_encoder.safetensors"] if projected else [])
    for name in names:
        a, b = load_file(str(tmp_path / "full" / name)), load_file(str(tmp_path / "resumed" / name))
        assert sorted(a) == sorted(b) and all(a[k].equal(b[k]) for k in a), name
    if projected:  # a checkpoint without the encoder cannot resume the MLP: said so
        shutil.rmtree(tmp_path / "resumed" / "checkpoint-4")
        for name in (*final, "train_results.json"):
            (tmp_path / "resumed" / name).unlink(missing_ok=True)
        checkpoint = tmp_path / "resumed" / "checkpoint-2"
        (checkpoint / "prefix_encoder.safetensors").unlink()
        write_complete_marker(checkpoint, 2)  # complete without it, as a checkpoint of an older tunekit
        with pytest.raises(ModelError) as err:
            _run(tiny_qwen, data, tmp_path / "resumed", resume_from_checkpoint=True, **common)
        assert str(err.value) == (
            f"{checkpoint} has no prefix_encoder.safetensors, which a prefix_projection run resumes its prefix MLP "
            "from (its adapter holds only the MLP's output): resume from a checkpoint tunekit wrote, or start a new "
            f"run with adapter_name_or_path: {checkpoint} (it continues as a plain prefix, without the MLP)."
        )


def test_a_prefix_adapter_is_continued_by_its_own_method_only(tiny_qwen, tmp_path):
    """Another method starts from the adapters merged into the weights, which a prefix cannot be; a prefix adapter
    before another adapter could not be applied either."""
    from peft import PrefixTuningConfig, TaskType, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tunekit.model.loader import load_model, load_tokenizer

    prefix = tmp_path / "prefix"
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen)
    get_peft_model(base, PrefixTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=4)).save_pretrained(
        str(prefix)
    )
    common = {"model_name_or_path": str(tiny_qwen), "template": "qwen"}
    cfg = load_config(None, {**common, "finetuning_type": "freeze", "adapter_name_or_path": str(prefix)})
    with pytest.raises(ConfigError) as err:
        load_model(cfg, load_tokenizer(cfg))
    assert str(err.value) == (
        f"adapter_name_or_path: {prefix} is a PREFIX_TUNING adapter, which cannot be merged into the weights to "
        "train finetuning_type freeze on top of it: set finetuning_type: ptuning to continue training it, or remove "
        "it."
    )
    cfg = load_config(None, {**common, "adapter_name_or_path": f"{prefix},{prefix}"})
    with pytest.raises(ConfigError) as err:
        load_model(cfg, load_tokenizer(cfg), is_trainable=False)
    assert str(err.value) == (
        f"adapter_name_or_path: {prefix} is a PREFIX_TUNING adapter, which cannot be merged into the weights, so it "
        "must be the last adapter listed: move it to the end, or drop the ones after it."
    )
    cfg = load_config(None, {**common, "finetuning_type": "ptuning", "adapter_name_or_path": str(prefix)})
    model = load_model(cfg, load_tokenizer(cfg))  # continued: its prefix trains further, from its saved values
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["prompt_encoder.default.embedding.weight"]
    saved = load_file(str(prefix / "adapter_model.safetensors"))["prompt_embeddings"]
    assert torch.equal(model.prompt_encoder["default"].embedding.weight.detach(), saved)
    cfg = load_config(None, {**cfg.model_dump(exclude_unset=True), "pre_seq_len": 8})
    with pytest.raises(ConfigError) as err:
        load_model(cfg, load_tokenizer(cfg))
    assert str(err.value) == (
        f"pre_seq_len 8 differs from the 4 virtual tokens of adapter_name_or_path {prefix}, which this run trains "
        "further: remove pre_seq_len or set it to 4."
    )
