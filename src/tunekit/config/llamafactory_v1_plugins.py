"""LLaMA-Factory v1's plugin blocks (``peft_config``, ``dist_config``, ``kernel_config``, ``quant_config``,
``init_config``, ``optim_config``, ``lr_scheduler_config``) read as tunekit options, key by key, with v1's defaults
(its ``LoraParams``, ``FreezeParams``, ``FSDP2Params``, ``BnbParams`` and Muon plugin). ``llamafactory_v1.py`` reads
the rest of a v1 config and holds the reading's :class:`V1Reader`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from .lists import split_list
from .problems import Problem, Said

LORA = {  # v1 key -> (tunekit option, v1 default written out where tunekit's differs, or None)
    "r": ("lora_rank", None),
    "lora_alpha": ("lora_alpha", 16),
    "lora_dropout": ("lora_dropout", 0.05),
    "target_modules": ("lora_target", None),
    "use_rslora": ("use_rslora", None),
    "use_dora": ("use_dora", None),
    "modules_to_save": ("additional_target", None),
    "adapter_name_or_path": ("adapter_name_or_path", None),
    "export_dir": ("export_dir", None),
    "export_size": ("export_size", None),
    "export_hub_model_id": ("export_hub_model_id", None),
    "infer_dtype": ("infer_dtype", None),
    "export_legacy_format": ("export_legacy_format", None),
}
FREEZE = {
    "freeze_trainable_layers": ("freeze_trainable_layers", None),
    "freeze_trainable_modules": ("freeze_trainable_modules", None),
    "freeze_extra_modules": ("freeze_extra_modules", None),
}
MUON_FIXED = {"momentum": 0.95, "nesterov": True, "ns_steps": 5}  # tunekit's torch.optim.Muon settings
UNSUPPORTED_KERNELS = {  # v1 kernel -> what it is (a part of the refusal, config/problem_texts_v1.py)
    "flash-linear-attention": "part_v1_kernel_fla",
    "cuda_fused_moe": "part_v1_kernel_fused_moe",
    "npu_fused_moe": "part_v1_kernel_npu",
    "npu_fused_rmsnorm": "part_v1_kernel_npu",
    "npu_fused_rope": "part_v1_kernel_npu",
    "npu_fused_swiglu": "part_v1_kernel_npu",
}


def shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


class V1Reader:
    """One v1 file being read: the tunekit ``options`` it gives (each with a note saying which v1 key set it), the
    ``remarks`` (v1 keys that need no tunekit option, and why) and the ``problems`` (v1 keys tunekit refuses)."""

    def __init__(self, values: dict[str, Any], path: str, world: tuple[int, str]):
        self.values, self.path, self.world = values, path, world
        self.options: dict[str, Any] = {}
        self.notes: dict[str, str] = {}
        self.remarks: list[str] = []
        self.problems: list[Problem] = []

    def set(self, option: str, value: Any, origin: str) -> None:
        self.options[option] = value
        self.notes[option] = origin

    def problem(self, key: str, message: Said) -> None:
        self.problems.append(Problem(message, (key.split(".", maxsplit=1)[0],)))

    def refusal(self, key: str, value: Any, why: Said) -> Said:
        """The refusal of v1's ``key: value``, ``why`` a ``part_v1_*`` reason (``config/problem_texts_v1.py``)."""
        return Said("v1_refused", key=key, value=shown(value), path=self.path, why=why)

    def refuse(self, key: str, value: Any, why: Said) -> None:
        self.problem(key, self.refusal(key, value, why))

    def remark(self, key: str, value: Any, why: str) -> None:
        self.remarks.append(f"{key}: {shown(value)} ({why})")

    def choice(self, key: str, value: Any, table: dict[str, Any], option: str) -> None:
        if value in table:
            self.set(option, table[value], f"`{key}: {shown(value)}`")
        else:
            self.refuse(key, value, Said("part_v1_expected_one_of", words=tuple(table)))

    def block(self, key: str, value: Any) -> dict[str, Any] | None:
        """A plugin block as a dict with a name (v1 also takes it as JSON text), or None after a problem."""
        if isinstance(value, str) and value.strip().startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                value = json.loads(value)
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            self.refuse(key, value, Said("part_v1_block"))
            return None
        return value

    def keys(self, key: str, block: dict[str, Any], allowed) -> bool:
        """Refuse the keys of ``block`` v1's plugin does not take; True when all are known."""
        unknown = [k for k in block if k != "name" and k not in allowed]
        for k in unknown:
            taken = ("name", *allowed)
            self.problem(
                key, Said("v1_unknown_key", key=f"{key}.{k}", path=self.path, name=block["name"], words=taken)
            )
        return not unknown


def _listed(value: Any) -> Any:
    """v1's lists of names are tunekit's comma-separated text."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or None
    return value


def _table(reader: V1Reader, key: str, block: dict[str, Any], table: dict) -> None:
    for name, (option, default) in table.items():
        if block.get(name) is not None:
            reader.set(option, _listed(block[name]), f"`{key}.{name}: {shown(block[name])}`")
        elif default is not None:
            reader.set(option, default, f"({key} without {name}: v1's default {shown(default)})")


def read_peft(reader: V1Reader, value: Any) -> None:
    block = reader.block("peft_config", value)
    if block is None:
        return
    name = block["name"]
    if name == "lora":
        if reader.keys("peft_config", block, LORA):
            reader.set("finetuning_type", "lora", "`peft_config.name: lora`")
            _table(reader, "peft_config", block, LORA)
    elif name == "freeze":
        if reader.keys("peft_config", block, [*FREEZE, "cast_trainable_params_to_fp32"]):
            reader.set("finetuning_type", "freeze", "`peft_config.name: freeze`")
            _table(reader, "peft_config", block, FREEZE)
            cast = block.get("cast_trainable_params_to_fp32", True)
            if cast:
                reader.remark("peft_config.cast_trainable_params_to_fp32", cast, "tunekit trains in float32 weights")
            else:
                reader.refuse("peft_config.cast_trainable_params_to_fp32", cast, Said("part_v1_cast_fp32"))
    else:
        reader.refuse("peft_config.name", name, Said("part_v1_peft_names"))


def read_dist(reader: V1Reader, value: Any) -> None:
    block = reader.block("dist_config", value)
    if block is None:
        return
    name = block["name"]
    if name == "fsdp2":
        if not reader.keys(
            "dist_config", block, ("reshard_after_forward", "offload_params", "pin_memory", "dcp_path")
        ):
            return
        words = "full_shard" if block.get("reshard_after_forward", True) else "shard_grad_op"
        words += " offload" if block.get("offload_params", False) else ""
        reader.set("fsdp", words, f"`dist_config: {shown(block)}` (FSDP2)")
        if block.get("dcp_path") is not None:
            reader.refuse("dist_config.dcp_path", block["dcp_path"], Said("part_v1_dcp_path"))
        if "pin_memory" in block:
            reader.remark("dist_config.pin_memory", block["pin_memory"], "tunekit's FSDP2 offload decides it")
    elif name == "deepspeed":
        if reader.keys("dist_config", block, ("config_file",)):
            if block.get("config_file"):
                reader.set("deepspeed", block["config_file"], f"`dist_config.config_file: {block['config_file']}`")
            else:
                reader.refuse("dist_config.config_file", block.get("config_file"), Said("part_v1_ds_config_file"))
    elif name == "fsdpturbo":
        reader.refuse("dist_config.name", name, Said("part_v1_fsdpturbo", ep_size=str(block.get("ep_size", 1))))
    else:
        reader.refuse("dist_config.name", name, Said("part_v1_dist_names"))


def read_kernels(reader: V1Reader, value: Any) -> None:
    block = reader.block("kernel_config", value)
    if block is None:
        return
    names = split_list(block["name"])
    for name in names:
        if name == "auto":
            reader.remark("kernel_config.name", name, "v1 applies Ascend NPU kernels only: none on GPUs and CPUs")
        elif name == "liger_kernel":
            reader.set("enable_liger_kernel", True, "`kernel_config.name: liger_kernel`")
        elif name in UNSUPPORTED_KERNELS:
            kernels = Said(UNSUPPORTED_KERNELS[name])
            reader.refuse("kernel_config.name", name, Said("part_v1_kernel_missing", kernels=kernels))
        else:
            reader.refuse("kernel_config.name", name, Said("part_v1_kernel_unknown"))
    allowed = ("require_logits",) if names == ["liger_kernel"] else ()
    if all(n in ("auto", "liger_kernel") for n in names):
        reader.keys("kernel_config", block, allowed)
        if "require_logits" in block:
            reader.remark("kernel_config.require_logits", block["require_logits"], "tunekit keeps logits as needed")


def read_quant(reader: V1Reader, value: Any) -> None:
    block = reader.block("quant_config", value)
    if block is None:
        return
    name = block["name"]
    if name not in ("bnb", "auto"):
        reader.refuse("quant_config.name", name, Said("part_v1_quant_names"))
        return
    if not reader.keys(
        "quant_config", block, ("quantization_bit", "compute_dtype", "double_quantization", "quantization_type")
    ):
        return
    bit = block.get("quantization_bit")
    if bit is None and name == "auto":
        reader.remark("quant_config", block, "auto without quantization_bit quantizes nothing")
        return
    bit = 4 if bit is None else bit
    reader.set("quantization_method", "bnb", f"`quant_config.name: {name}` (bitsandbytes)")
    reader.set("quantization_bit", bit, f"`quant_config.quantization_bit: {shown(bit)}`")
    for key in ("double_quantization", "quantization_type"):
        if key in block:
            reader.set(key, block[key], f"`quant_config.{key}: {shown(block[key])}`")
    if "compute_dtype" in block:
        reader.refuse("quant_config.compute_dtype", block["compute_dtype"], Said("part_v1_compute_dtype"))


def read_init(reader: V1Reader, value: Any) -> None:
    block = reader.block("init_config", value)
    if block is None or not reader.keys("init_config", block, ()):
        return
    name = block["name"]
    if name in ("init_on_meta", "init_on_rank0", "init_on_default"):
        reader.set("low_cpu_mem_usage", True, f"`init_config.name: {name}` (no random-init copy of the weights)")
    else:
        reader.refuse("init_config.name", name, Said("part_v1_init_names"))


def read_optim(reader: V1Reader, value: Any) -> None:
    block = reader.block("optim_config", value)
    if block is None:
        return
    if block["name"] != "muon":
        reader.refuse("optim_config.name", block["name"], Said("part_v1_optim_names"))
        return
    if not reader.keys("optim_config", block, ("lr", "wd", *MUON_FIXED, "adamw_betas", "adamw_eps")):
        return
    reader.set("use_muon", True, "`optim_config.name: muon`")
    wd = block.get("wd", 0.1)
    reader.set("weight_decay", wd, f"`optim_config.wd: {shown(wd)}`" if "wd" in block else "(v1 Muon's wd 0.1)")
    betas = block.get("adamw_betas", [0.9, 0.95])
    if not (isinstance(betas, list) and len(betas) == 2):
        reader.refuse("optim_config.adamw_betas", betas, Said("part_v1_two_numbers"))
    else:
        origin = f"`optim_config.adamw_betas: {shown(betas)}`" if "adamw_betas" in block else "(v1 Muon's betas)"
        reader.set("adam_beta1", betas[0], origin)
        reader.set("adam_beta2", betas[1], origin)
    if "adamw_eps" in block:
        reader.set("adam_epsilon", block["adamw_eps"], f"`optim_config.adamw_eps: {shown(block['adamw_eps'])}`")
    for key, fixed in MUON_FIXED.items():
        if key in block and block[key] != fixed:
            reader.refuse(f"optim_config.{key}", block[key], Said("part_v1_muon_fixed", key=key, fixed=shown(fixed)))
    if "lr" in block:
        reader.remark("optim_config.lr", block["lr"], "v1 replaces it with learning_rate, as tunekit does")


def read_scheduler(reader: V1Reader, value: Any) -> None:
    reader.refuse("lr_scheduler_config", value, Said("part_v1_scheduler"))


PLUGINS: dict[str, Callable[[V1Reader, Any], None]] = {
    "peft_config": read_peft,
    "dist_config": read_dist,
    "kernel_config": read_kernels,
    "quant_config": read_quant,
    "init_config": read_init,
    "optim_config": read_optim,
    "lr_scheduler_config": read_scheduler,
}
