"""Every example config in ``examples/`` runs, so none can rot (docs/workflows/ points to them).

Each file is loaded as a user loads it; then only what cannot run here is substituted: the model (a tiny model of the
same family as the example's template, since the real one is a download), output_dir / export_dir (a temporary
folder), dataset_dir (the same folder, made absolute: the examples give it relative to the repository root),
adapter_name_or_path (the adapter the SFT example just trained) and the step count (max_steps 2). Every other
option — method, stage, LoRA and quantization settings, losses, precision — is the example's own.

Not run here: examples/optimizers/ (tests/train/test_optimizer_examples.py runs those), examples/quickstart.yaml
(tests/project/test_quickstart.py trains it through examples/quickstart.py), the GPTQ example
(tests/export/test_gptq_export.py exports with it, in llm-compressor's own environment), the LoRA example on its
GPTQ base (tests/model/test_compressed_base_qlora.py trains it on a compressed-tensors tiny base), and the multi-GPU
examples, which need several processes: they are loaded and planned for 2 GPUs (the engine decision the launcher
takes, memory per device); the 2-process gloo runs of DDP, DeepSpeed and FSDP are tests/distributed/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

EXAMPLES = ROOT / "examples"
NOT_HERE = {
    "examples/quickstart.yaml": "tests/project/test_quickstart.py trains it",
    "examples/export-and-serve/qwen_gptq.yaml": "tests/export/test_gptq_export.py exports with it (a slow test)",
    "examples/qlora/qwen_gptq_base_lora_sft.yaml": "tests/model/test_compressed_base_qlora.py trains it (its base "
    "is a compressed-tensors folder)",
    "examples/multi-gpu/qwen_lora_sft_ray.yaml": "tests/distributed/test_ray_launch.py loads and plans it with "
    "USE_RAY=1 (it needs the Ray Train launch; its 2-worker CPU run is there too)",
}
TRAINED = [
    "sft/qwen_lora_sft.yaml",
    "preference/qwen_lora_dpo.yaml",
    "preference/qwen_lora_kto.yaml",
    "preference/qwen_lora_reward.yaml",
    "qlora/qwen_qlora_sft.yaml",
    "sft/qwen_ptuning_sft.yaml",
]
PLANNED = [
    "multi-gpu/qwen_lora_sft_ddp.yaml",
    "multi-gpu/qwen_full_sft_ds_z3.yaml",
    "multi-gpu/qwen_full_sft_fsdp.yaml",
    "multi-gpu/qwen_full_sft_ulysses.yaml",  # cp_size on 2 processes: tests/distributed/test_context_parallel.py
]
AFTER_TRAINING = [
    "export-and-serve/qwen_lora_merge.yaml",
    "export-and-serve/qwen_lora_chat.yaml",
    "export-and-serve/qwen_lora_gguf.yaml",
]


def test_every_example_is_covered():
    found = {p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.yaml") if p.parts[-2] != "optimizers"}
    covered = {*TRAINED, *PLANNED, *AFTER_TRAINING, *(k.removeprefix("examples/") for k in NOT_HERE)}
    assert found == covered


def _options(example: str, model: Path, out: Path, **more) -> dict:
    options = yaml.safe_load((EXAMPLES / example).read_text(encoding="utf-8"))
    assert options["template"] == "qwen"  # the tiny model substituted is a qwen2 one
    options["model_name_or_path"] = str(model)
    if "dataset_dir" in options:
        options["dataset_dir"] = str(ROOT / options["dataset_dir"])
    if "output_dir" in options:
        options.update(output_dir=str(out), max_steps=2)
    if "export_dir" in options:
        options["export_dir"] = str(out)
    options.update(more)
    return options


def _train(example: str, model: Path, out: Path) -> dict:
    from tunekit.config import load_config
    from tunekit.flow import run_train

    return run_train(load_config(None, _options(example, model, out)))


@pytest.fixture(scope="module")
def sft_adapter(tiny_qwen, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("examples") / "sft"
    results = _train(TRAINED[0], tiny_qwen, out)
    assert results["total_steps"] == 2 and "eval_loss" in results  # val_size 0.25: the final evaluation ran
    return out


def test_sft_example_trains_an_adapter(sft_adapter):
    import json

    adapter = json.loads((sft_adapter / "adapter_config.json").read_text())
    modules = adapter["target_modules"]  # lora_target: all = every linear layer of the 2 decoder layers
    assert (adapter["r"], len(modules), sorted({m.rsplit(".", 1)[-1] for m in modules})) == (
        8,
        14,
        ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"],
    )


@pytest.mark.parametrize("example", TRAINED[1:])
def test_training_example_runs(example, tiny_qwen, tmp_path):
    results = _train(example, tiny_qwen, tmp_path / "out")
    assert results["total_steps"] == 2
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize("example", PLANNED)
def test_multi_gpu_example_loads_and_plans(example, tiny_qwen, tmp_path):
    from tunekit.config import load_config
    from tunekit.plan import make_plan

    cfg = load_config(None, _options(example, tiny_qwen, tmp_path / "out"))
    plan = make_plan(cfg, gpu="A100-80GB", gpus=2)
    assert plan.world_size == 2
    engine = {
        "qwen_lora_sft_ddp.yaml": "DDP",
        "qwen_full_sft_ds_z3.yaml": "DeepSpeed ZeRO-3",
        "qwen_full_sft_fsdp.yaml": "FSDP full_shard",
        "qwen_full_sft_ulysses.yaml": "FSDP full_shard",
    }
    assert plan.setup["engine"] == engine[Path(example).name]


def test_export_example_merges_the_adapter(sft_adapter, tiny_qwen, tmp_path):
    from transformers import AutoModelForCausalLM

    from tunekit.config import load_config
    from tunekit.export import export_model

    out = tmp_path / "merged"
    export_model(load_config(None, _options(AFTER_TRAINING[0], tiny_qwen, out, adapter_name_or_path=str(sft_adapter))))
    merged = AutoModelForCausalLM.from_pretrained(out)  # plain transformers: no peft needed to load it
    assert not any("lora" in name for name, _ in merged.named_parameters())


def test_gguf_example_writes_a_verified_gguf_and_modelfile(sft_adapter, tiny_qwen, tmp_path):
    from tunekit.config import load_config
    from tunekit.export import export_model

    out = tmp_path / "gguf"
    export_model(load_config(None, _options(AFTER_TRAINING[2], tiny_qwen, out, adapter_name_or_path=str(sft_adapter))))
    assert sorted(p.name for p in out.glob("[Mm]o*")) == ["Modelfile", "model-q8_0.gguf"]  # verified in llama.cpp


def test_chat_example_answers(sft_adapter, tiny_qwen):
    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine

    cfg = load_config(
        None,
        _options(
            AFTER_TRAINING[1],
            tiny_qwen,
            None,
            adapter_name_or_path=str(sft_adapter),
            max_new_tokens=4,
            do_sample=False,
        ),
    )
    engine = ChatEngine(cfg)
    generation = engine.start([{"role": "user", "content": "What is 2 + 3?"}])
    text = "".join(generation)  # streams the reply
    response = generation.response()
    assert response.text == text
    assert 1 <= response.completion_tokens <= 4
