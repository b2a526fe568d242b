"""The training set-up as the planner sees it: precision, method, sharding, batch, resolved from a Config.

One place turns options into the handful of facts the memory and time models need, mirroring what
``tunekit train`` does (``tunekit.model.finetuning``: LoRA adapters in fp32 through PEFT, full/freeze
trainable weights upcast to fp32; the model loaded in the compute dtype; HF autocast for bf16/fp16).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config.engines import DEEPSPEED_PRESETS
from ..config.lists import split_list
from ..config.method_rules import oft_sizes
from ..config.schema import Config
from ..train.decisions import decide_features
from ..train.engines.deepspeed_config import read_deepspeed
from ..train.engines.distributed import engine_plan
from ..train.machine import Machine, cpu_has_native_bf16
from .notes import Note
from .optimizer_states import optimizer_method


@dataclass(frozen=True)
class Setup:
    finetuning_type: str
    lora_rank: int
    lora_targets: tuple[str, ...] | None  # None = every linear of the decoder layers
    use_dora: bool
    additional_target: tuple[str, ...]
    freeze_layers: int
    freeze_modules: tuple[str, ...]
    freeze_extra: tuple[str, ...]
    base_bytes: float  # bytes per frozen base weight
    compute_bytes: int  # bytes of activations under autocast (or the weight dtype without it)
    autocast: bool
    quant_bits: int | None
    double_quant: bool
    grad_ckpt: bool
    liger: bool  # Liger's kernels (RunDecisions.liger)
    attn: str  # sdpa | eager | fa2
    optim: str
    zero_stage: int | None  # None: no DeepSpeed
    offload_optimizer: bool
    offload_params: bool
    fsdp: str | None
    world_size: int
    nodes: int
    micro_batch: int
    grad_accum: int
    seq_len: int
    stage: str
    padded: bool = (
        True  # batches carry an attention mask (dynamic padding, or the block mask packed rows get on sdpa/eager)
    )
    padding_free: bool = False  # the micro-batch is one row of micro_batch x seq_len tokens (data/padding_free.py)
    token_budget: int | None = (
        None  # max_tokens_per_batch: a micro-batch holds at most this many tokens (padding included)
    )
    ds_reduce_bucket: float | None = None  # elements; None = HF "auto" (hidden^2)
    ds_overlap_comm: bool = False
    ds_max_live: float = 1e9
    custom_optim: str | None = None  # galore, apollo, badam, adam_mini, muon (plan/optimizer_states.py)
    custom_optim_settings: tuple = ()
    oft: tuple = ()  # finetuning_type oft: (oft_rank, oft_block_size, targets or None for all)
    prompt: tuple = ()  # ("ptuning", pre_seq_len, prefix_projection, prefix_hidden_size) or ("prompt", n)
    pure_bf16: bool = False  # weights, gradients and optimizer states in bf16, no autocast
    llama_pro: bool = False  # freeze: the trainable layers are the expanded blocks (model/expand.py)
    reference_copy: bool = False  # a frozen reference model is held while training (holds_reference_copy)
    ckpt_layers: int | None = None  # with grad_ckpt: how many decoder layers (the lowest) are checkpointed; None = all
    chunked_loss: bool = False  # the LM head + loss run in chunks of tokens (train/chunked_head.py): no whole logits
    vision_freeze: tuple[bool, bool, bool] = (
        True,
        True,
        False,
    )  # freeze_vision_tower, _multi_modal_projector, _language_model
    media_patches: int = 0  # image/video patches of the largest micro-batch (the vision tower's tokens)
    largest_image_patches: int = 0  # patches of the largest single image or clip (eager attention's score matrix)
    recompute: tuple[bool, bool] = (False, False)  # elementwise_recompute: (MLP element-wise outputs, norm outputs)
    host: bool = False  # trains on the CPU (use_cpu): host memory from glibc's malloc, not a CUDA caching allocator
    liger_loss: bool = False  # Liger's fused linear cross-entropy computes the loss (RunDecisions.liger_fused_loss)
    heap_guard: bool = False  # host/heap.py bounds the CPU heap's fragmentation (RunDecisions.heap_guard)
    router_aux: bool = False  # moe_aux_loss_coef: the routers' logits feed transformers' load-balancing loss
    cp_size: int = 1  # context parallelism: each row's positions split over cp_size processes (engines/ulysses.py)

    @property
    def gpus_per_node(self) -> int:
        return max(1, self.world_size // max(1, self.nodes))

    @property
    def batch_tokens(self) -> int:
        """Tokens of the largest micro-batch: the token budget when one is set, else micro_batch x seq_len."""
        return self.token_budget if self.token_budget else self.micro_batch * self.seq_len

    @property
    def tokens(self) -> int:
        """Tokens of the largest micro-batch that one process runs through its layers: the whole micro-batch, or
        under context parallelism its 1/cp_size share of each row (rows padded to a multiple: ``ulysses.shard_batch``).
        Every per-token activation is counted over these; attention still spans the whole row (:attr:`row_len`)."""
        if self.cp_size == 1:
            return self.batch_tokens
        return self.micro_batch * -(-self.seq_len // self.cp_size)  # token budgets are refused with cp_size

    @property
    def row_len(self) -> int:
        """Length of one row (what eager attention's score matrix spans): the whole micro-batch when padding-free.
        Under context parallelism too each process attends over the whole row, with 1/cp_size of the heads."""
        return self.batch_tokens if self.padding_free else min(self.seq_len, self.batch_tokens)

    @property
    def trainable_bytes(self) -> int:
        """Trainable weights are fp32 (PEFT keeps adapters fp32; tunekit upcasts full/freeze), except that
        DeepSpeed holds them in the 16-bit compute dtype and keeps its own fp32 master copy."""
        if self.pure_bf16 or (self.zero_stage is not None and self.compute_bytes == 2):
            return 2
        return 4

    @property
    def shards(self) -> int:
        return self.world_size  # FSDP2 and ZeRO shard over every rank (tunekit has no hybrid sharding)

    def with_(self, **changes) -> Setup:
        return replace(self, **changes)


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(split_list(text))


def deepspeed_settings(value: str | None) -> tuple[int | None, bool, bool]:
    """``(stage, offload_optimizer, offload_params)`` from a preset name or a DeepSpeed JSON file."""
    if not value:
        return None, False, False

    ds = read_deepspeed(value.strip())
    return ds.stage, ds.offload_optimizer, ds.offload_param


# (stage, offload_optimizer, offload_params) of each preset, read from the preset files the launcher uses
DS_PRESETS = {name: deepspeed_settings(name) for name in DEEPSPEED_PRESETS}


def deepspeed_buffers(value: str | None) -> tuple[float | None, bool, float]:
    """``(reduce_bucket_size or None for "auto", overlap_comm, stage3_max_live_parameters)`` in elements."""
    if not value:
        return None, False, 1e9

    zero = read_deepspeed(value.strip()).config.get("zero_optimization") or {}

    def number(key: str, default):
        raw = zero.get(key, default)
        return None if raw in ("auto", None) else float(raw)

    return (
        number("reduce_bucket_size", 5e8),
        bool(zero.get("overlap_comm", False)),
        number("stage3_max_live_parameters", 1e9) or 1e9,
    )


def engine_settings(cfg: Config, world_size: int) -> tuple[int | None, bool, bool, str | None, bool]:
    """``(zero_stage, offload_optimizer, offload_params, fsdp mode, fsdp offload)`` as the launcher decides them
    (``train.distributed.engine_plan``): FSDP acts as full_shard when it reshards after forward (ZeRO-3 like),
    else as shard_grad_op (ZeRO-2 like), ``fsdp_config.reshard_after_forward`` included."""
    plan = engine_plan(cfg, world_size)
    if plan.engine == "fsdp":
        return None, False, False, "full_shard" if plan.zero_stage == 3 else "shard_grad_op", plan.offload_param
    return plan.zero_stage, plan.offload_optimizer, plan.offload_param, None, False


def memory_seq_len(cfg: Config, longest_row: int | None = None) -> tuple[int, str]:
    """``(tokens per row of the largest micro-batch, where that came from)``, the row length the memory plan uses.

    ``longest_row`` is the longest training row in tokens (cut to ``cutoff_len``): the data's, measured by ``tunekit
    plan`` or read from the tokenized rows by ``tunekit train``. Batches are padded to their longest row, rounded up to
    ``pad_to_multiple_of``; without a measurement every row may reach ``cutoff_len``. PPO/GRPO rows are the prompt
    plus up to ``generation_max_new_tokens`` generated tokens (``cutoff_len`` cuts only the prompt)."""
    if longest_row is None:
        seq, source = cfg.cutoff_len, Note("source_cutoff")
    else:
        pad = max(1, cfg.pad_to_multiple_of)
        seq = min(cfg.cutoff_len, -(-min(longest_row, cfg.cutoff_len) // pad) * pad)
        source = Note("source_padding_free" if cfg.padding_free else "source_padded")
    if cfg.stage in ("ppo", "grpo"):
        seq, source = seq + cfg.generation_max_new_tokens, Note("source_generation", source=source)
    if cfg.finetuning_type == "prompt":  # prompt tuning runs its virtual tokens before every row
        seq, source = seq + cfg.num_virtual_tokens, Note("source_virtual", source=source)
    return seq, source


def prompt_setup(cfg: Config) -> tuple:
    """What P-Tuning v2 / prompt tuning train (``Setup.prompt``; ``plan/params.prompt_params`` counts it)."""
    if cfg.finetuning_type == "ptuning":
        return ("ptuning", cfg.pre_seq_len, cfg.prefix_projection, cfg.prefix_hidden_size)
    if cfg.finetuning_type == "prompt":
        return ("prompt", cfg.num_virtual_tokens)
    return ()


def holds_reference_copy(cfg: Config) -> bool:
    """Whether training holds a frozen second model as reference (``stages/reference_policy.load_reference``): a
    ``ref_model``, or the starting model again when the policy is not LoRA (whose disabled adapter serves instead) —
    for the stages that use one: dpo (not orpo/simpo), kto, ppo, grpo with ``grpo_beta > 0``, sft with ASFT. A
    precomputed reference (dpo/kto ``precompute_ref_log_probs``) is freed before training starts."""
    uses = {
        "sft": bool(cfg.use_asft_loss),
        "dpo": cfg.pref_loss not in ("orpo", "simpo"),
        "kto": True,
        "ppo": True,
        "grpo": cfg.grpo_beta > 0,
    }.get(cfg.stage, False)
    if cfg.stage in ("dpo", "kto") and cfg.precompute_ref_log_probs:
        uses = False
    return bool(uses and (cfg.ref_model or cfg.finetuning_type != "lora"))


def planned_machine(cfg: Config, world_size: int = 1):
    """The device ``tunekit plan`` plans for: this host's CPU with ``use_cpu``, else CUDA GPUs (one per process)."""
    return Machine.cpu(world_size, cpu_has_native_bf16()) if cfg.use_cpu else Machine.cuda(world_size)


def resolve_setup(
    cfg: Config, world_size: int = 1, nodes: int = 1, seq_len: int | None = None, decisions=None, shape=None
) -> Setup:
    """The planner's set-up of ``cfg``; its features (chunked head, recompute, Liger's loss, the heap guard, the host)
    are read from ``decisions`` (:class:`~tunekit.train.decisions.RunDecisions`, what the run decided), by default
    those of the planned device (:func:`planned_machine`)."""
    if decisions is None:
        decisions = decide_features(cfg, planned_machine(cfg, world_size))
    precision = decisions.precision  # the device's default or the options' choice (train/precision.py)
    base, compute, autocast = precision.weight_bytes, precision.compute_bytes, precision.autocast is not None
    stage, off_opt, off_param, fsdp, fsdp_offload = engine_settings(cfg, world_size)
    bucket, overlap, max_live = deepspeed_buffers(cfg.deepspeed)
    attn = decisions.attention or (shape.default_attn if shape is not None else "sdpa")  # auto: the model's default
    return Setup(
        finetuning_type=cfg.finetuning_type,
        lora_rank=cfg.lora_rank,
        lora_targets=None if cfg.lora_target.strip() == "all" else _split(cfg.lora_target),
        use_dora=cfg.use_dora,
        additional_target=_split(cfg.additional_target) if cfg.finetuning_type == "lora" else (),
        freeze_layers=cfg.freeze_trainable_layers,
        freeze_modules=_split(cfg.freeze_trainable_modules) or ("all",),
        freeze_extra=_split(cfg.freeze_extra_modules),
        base_bytes=base,
        compute_bytes=compute,
        autocast=autocast,
        quant_bits=cfg.quantization_bit,
        double_quant=cfg.double_quantization,
        grad_ckpt=cfg.use_gradient_checkpointing,
        liger=decisions.liger.on,
        attn=attn,
        optim=cfg.optim,
        zero_stage=stage,
        offload_optimizer=off_opt or fsdp_offload,
        offload_params=off_param or fsdp_offload,
        fsdp=fsdp,
        world_size=world_size,
        nodes=nodes,
        micro_batch=cfg.per_device_train_batch_size,
        grad_accum=cfg.gradient_accumulation_steps,
        seq_len=seq_len or cfg.cutoff_len,
        stage=cfg.stage,
        # FlashAttention-2 runs neat-packed / padding-free rows as varlen sequences without a mask; sdpa and eager get
        # the block-diagonal mask transformers builds from the restarting position ids (data/padding_free.py).
        # Context parallelism drops the mask: the gathered rows are masked causally (train/engines/ulysses.py)
        padded=cfg.cp_size == 1
        and (not (cfg.padding_free or (cfg.use_packing and cfg.neat_packing)) or attn != "fa2"),
        padding_free=cfg.padding_free,
        token_budget=cfg.max_tokens_per_batch,
        ds_reduce_bucket=bucket,
        ds_overlap_comm=overlap,
        ds_max_live=max_live,
        **dict(zip(("custom_optim", "custom_optim_settings"), optimizer_method(cfg))),
        pure_bf16=cfg.pure_bf16,
        llama_pro=cfg.use_llama_pro,
        reference_copy=holds_reference_copy(cfg),
        ckpt_layers=cfg.gradient_checkpointing_layers if cfg.use_gradient_checkpointing else None,
        liger_loss=decisions.liger_fused_loss.on,
        chunked_loss=decisions.chunked_lm_head.on,
        recompute=tuple(decisions.elementwise_recompute.detail),
        host=decisions.machine.kind == "cpu",
        heap_guard=decisions.heap_guard.on,
        vision_freeze=(cfg.freeze_vision_tower, cfg.freeze_multi_modal_projector, cfg.freeze_language_model),
        oft=(*oft_sizes(cfg), None if cfg.oft_target.strip() == "all" else _split(cfg.oft_target))
        if cfg.finetuning_type == "oft"
        else (),
        prompt=prompt_setup(cfg),
        router_aux=cfg.moe_aux_loss_coef is not None,  # model/moe.py configure_moe: output_router_logits
        cp_size=cfg.cp_size,
    )
