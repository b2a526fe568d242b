"""Peak memory per device, by component (bytes), for one training set-up.

``peak = static (weights, gradients, optimizer states, sharded by ZeRO/FSDP)
       + max(dynamic x fragmentation, optimizer-step temporaries)
       + distributed buffers + runtime overhead``. Every term is derived in docs/memory-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .activations import dynamic_peak_bytes
from .architectures import ModelShape
from .notes import Note
from .optimizer_states import custom_gradient_bytes
from .params import ParamCounts, count_params, optimizer_state_bytes, optimizer_step_temp_bytes, quantized_bytes
from .training_setup import Setup
from .vision_memory import count_vision
from .vision_towers import tower_forward_peak, tower_saved_bytes

GiB = 1024**3
CUDA_OVERHEAD = 0.9 * GiB  # context, cuBLAS workspaces, allocator slack (one process)
NCCL_OVERHEAD = 0.3 * GiB  # communicator buffers per rank when world > 1
FRAGMENTATION = 0.10  # reserved / allocated - 1 on the token-dependent part
# On the CPU (glibc malloc): resident / live - 1 on the token-dependent part. Freed transients stay in the heap, split
# by the small tensors allocated between them, and the heap grows around them. Measured without host/heap.py's
# guard at Qwen2.5-0.5B's shape (LoRA, fp32, 4 x 960 tokens; benchmarks/dpo_memory.py --rss, docs/memory-model.md
# section 3.7): heap kept over the live dynamic bytes 0.27 / 0.31 for dpo at 4 / 6 layers, 0.42 for each added layer
# (what dominates at real layer counts), sft 0.19 at 4 layers; + 0.05 for the live bytes measured above the plan's.
HOST_FRAGMENTATION = 0.45
# With the guard (every CPU training run on glibc, section 3.8) the freed memory a pass strands is bounded instead: a
# full reading comes at the latest after the resident memory grew by the slack, and it trims once the stranded part
# exceeds the slack, so at most twice the slack is stranded at any check.
# Twice host/heap.py's slack (host.malloc.GUARD_SLACK; tests/plan/test_plan_memory.py).
HOST_GUARD_BOUND = 2 * (256 << 20)
DS_ABF = 1.5  # DeepSpeed's additional_buffer_factor for CPU memory of offloaded states


@dataclass
class MemoryEstimate:
    components: dict[str, float]  # bytes per device
    cpu_bytes: float = 0.0  # host memory for offloaded states (per node)
    counts: ParamCounts | None = None
    notes: list[Note] = field(default_factory=list)

    @property
    def total(self) -> float:
        c = self.components
        static = sum(v for k, v in c.items() if k not in ("activations", "logits", "fragmentation", "optimizer_step"))
        dynamic = c["activations"] + c["logits"] + c["fragmentation"]
        return static + max(dynamic, c["optimizer_step"])

    def additive(self) -> dict[str, float]:
        """Components that sum to the total: the optimizer step counts only by what it adds on top of
        the activations (it runs after backward has freed them)."""
        c = dict(self.components)
        dynamic = c["activations"] + c["logits"] + c["fragmentation"]
        c["optimizer_step"] = max(0.0, c["optimizer_step"] - dynamic)
        return c

    def gib(self) -> dict[str, float]:
        out = {k: round(v / GiB, 3) for k, v in self.additive().items()}
        out["total_gib"] = round(self.total / GiB, 3)
        return out


def model_state_bytes(
    shape: ModelShape, setup: Setup, counts: ParamCounts
) -> tuple[dict[str, float], float, list[Note]]:
    """Weights, gradients, optimizer states and master weights per device, plus CPU bytes when offloaded."""
    notes: list[Note] = []
    P_t = counts.trainable
    N = max(1, setup.shards)
    # QLoRA: what is not quantized (embeddings, norms, lm_head) stays in the load dtype (model/finetuning.py)
    frozen = quantized_bytes(counts, setup) + counts.frozen_other * setup.base_bytes
    tb = setup.trainable_bytes
    c: dict[str, float] = dict.fromkeys(
        ("base_weights", "trainable_params", "gradients", "optimizer_states", "master_weights"), 0.0
    )
    cpu = 0.0
    if setup.zero_stage is not None:
        c, cpu = zero_state_bytes(shape, setup, counts, frozen)
    else:
        opt = optimizer_state_bytes(setup, counts, shape, tb)
        weights, grads = tb * P_t, tb * P_t
        if setup.custom_optim and setup.finetuning_type == "full":  # BAdam / layer-wise: fewer live gradients
            live = custom_gradient_bytes(setup.custom_optim, setup.custom_optim_settings, shape, tb)
            grads = grads if live is None else min(grads, live)
        if setup.fsdp == "full_shard":
            frozen, weights, grads, opt = frozen / N, weights / N, grads / N, opt / N
        elif setup.fsdp == "shard_grad_op":
            grads, opt = grads / N, opt / N
        if setup.fsdp and setup.offload_params:
            cpu += (frozen + weights + opt) * N / setup.nodes
            frozen = weights = opt = 0.0
        c.update(base_weights=frozen, trainable_params=weights, gradients=grads, optimizer_states=opt)
    return c, cpu, notes


def zero_state_bytes(
    shape: ModelShape, setup: Setup, counts: ParamCounts, frozen: float
) -> tuple[dict[str, float], float]:
    """DeepSpeed's model states per device and on the host (per node), placed where DeepSpeed 0.19.8 allocates them
    (docs/memory-model.md section 2, "Sharding"; tests/plan/test_plan_zero_offload.py checks them against DeepSpeed's
    own estimators). 16-bit gradients: ZeRO-1 keeps each parameter's whole ``.grad`` until the boundary reduction;
    ZeRO-2 copies its partition into ``grads_in_partition`` on the GPU, or straight into the fp32 gradients on the host
    under optimizer offload (``stage_1_and_2.copy_grads_in_partition``); ZeRO-3 reduces into
    ``grad_partitions_flat_buffer`` on ``self.device``: the host under optimizer offload (``stage3.py
    _setup_for_real_optimizer``). Optimizer offload also keeps on the host ZeRO-1/2's 16-bit copy of the partition
    (``param_buffer_of_bit16_for_cpu_offload_groups``) and, with gradient accumulation, its 16-bit accumulated
    gradients (``accumulated_grads_in_cpu``)."""
    s, N, P_t = setup.zero_stage, max(1, setup.shards), counts.trainable
    mixed = setup.compute_bytes == 2
    b16 = 2 if mixed else 4
    w16, grads_lp = b16 * P_t, b16 * P_t
    master, grads_fp32 = (4 * P_t, 4 * P_t) if mixed else (0.0, 0.0)
    if s >= 1 and not mixed:  # fp32 weights: ZeRO-1/2 still clone the fp32 partition and flatten its gradients into a
        # new fp32 tensor at the step; ZeRO-3 shares its partition (copies it only to the host) but keeps the fp32
        # gradient buffer (stage_1_and_2.py __init__ / step, stage3.py _create_fp32_partitions /
        # initialize_optimizer_states)
        grads_fp32 = 4 * P_t
        master = 4 * P_t if s <= 2 or setup.offload_optimizer else 0.0
    opt = optimizer_state_bytes(setup, counts, shape, 4)
    if s >= 3:
        frozen, w16 = frozen / N, w16 / N
    if s >= 1:
        master, opt, grads_fp32 = master / N, opt / N, grads_fp32 / N
    if s >= 2:
        grads_lp /= N
    host = 0.0  # per rank
    if setup.offload_optimizer and s >= 1:
        host += master + opt + grads_fp32
        master = opt = grads_fp32 = 0.0
        if s >= 2:  # ZeRO-2: no 16-bit partition at all (into the fp32 gradients); ZeRO-3: the 16-bit one on the host
            host, grads_lp = host + (grads_lp if s >= 3 else 0.0), 0.0
        if s <= 2:
            host += b16 * P_t / N * (2 if setup.grad_accum > 1 else 1)
    if setup.offload_params and s >= 3:
        host += frozen + w16
        frozen = w16 = 0.0
    c = dict(
        base_weights=frozen,
        trainable_params=w16,
        gradients=grads_lp + grads_fp32,
        optimizer_states=opt,
        master_weights=master,
    )
    return c, host * N / setup.nodes * DS_ABF


def distributed_buffer_bytes(shape: ModelShape, setup: Setup, counts: ParamCounts) -> float:
    """The engine's buffers (:func:`engine_buffer_bytes`) and context parallelism's (:func:`exchange_buffer_bytes`)."""
    return engine_buffer_bytes(shape, setup, counts) + exchange_buffer_bytes(shape, setup)


def exchange_buffer_bytes(shape: ModelShape, setup: Setup) -> float:
    """Context parallelism (``cp_size`` > 1): the all-to-all around each attention (``train/engines/ulysses.py``)
    copies the tensor it exchanges into contiguous parts to send and receives as many, c q bytes per token of the
    process each for the widest one (the query, the attention output); one exchange is alive at a time."""
    if setup.cp_size == 1:
        return 0.0
    return 2 * setup.compute_bytes * shape.q_dim * setup.tokens


def engine_buffer_bytes(shape: ModelShape, setup: Setup, counts: ParamCounts) -> float:
    """DeepSpeed's buckets and gathered parameters, FSDP's units, DDP's gradient buckets."""
    h = shape.hidden
    if setup.zero_stage is not None:
        bucket = setup.ds_reduce_bucket if setup.ds_reduce_bucket is not None else h * h  # HF "auto": hidden^2
        if setup.zero_stage in (1, 2):
            ipg = bucket * 2 * (2 if setup.ds_overlap_comm else 1)  # 16-bit IPG bucket(s), allocated even for LoRA
            # optimizer offload: temp_grad_buffer_for_gpu_offload, the largest trainable parameter in 16 bits
            staging = 2 * counts.largest_trainable_tensor if setup.offload_optimizer else 0.0
            return ipg + staging
        if setup.zero_stage >= 3:
            live = min(setup.ds_max_live, max(shape.largest_module_params, shape.layer_params + 0.9 * h * h))
            # gathered params + lm_head gathered at the loss + the 16-bit IPG bucket (contiguous_gradients, on the GPU
            # with or without offload: stage3.py _setup_for_real_optimizer)
            return 2 * live + 2 * shape.hidden * shape.vocab + 2 * bucket
        return 0.0
    if setup.fsdp in ("full_shard", "shard_grad_op"):
        return 3 * 2 * shape.layer_params + 2 * max(shape.embed_params, shape.lm_head_params)
    if setup.world_size > 1:  # DDP gradient buckets (not a view of .grad)
        return setup.trainable_bytes * counts.trainable
    return 0.0


def estimate_memory(shape: ModelShape, setup: Setup, counts: ParamCounts | None = None) -> MemoryEstimate:
    counts = counts or count_params(shape, setup)
    states, cpu, notes = model_state_bytes(shape, setup, counts)
    seqs = sequences_setup(setup)
    dyn = dynamic_peak_bytes(shape, seqs, counts)
    N = max(1, setup.shards)
    step = optimizer_step_temp_bytes(setup, counts, setup.trainable_bytes)
    if setup.fsdp in ("full_shard", "shard_grad_op"):
        step /= N
    overhead = CUDA_OVERHEAD + (NCCL_OVERHEAD if setup.world_size > 1 else 0.0)
    comps = {
        **states,
        "activations": dyn["activations"],
        "logits": dyn["logits"],
        "optimizer_step": step,
        "distributed_buffers": distributed_buffer_bytes(shape, setup, counts),
        "fragmentation": fragmentation_bytes(setup, dyn["activations"] + dyn["logits"]),
        "overhead": overhead,
    }
    if shape.vision is not None:
        vision_memory(shape, seqs, comps, notes)
    if shape.num_experts:
        notes.append(Note("note_moe", model=shape.name))
    if (
        setup.reference_copy
    ):  # the reference: the starting model (or ref_model, planned at its size) frozen, load dtype
        comps["base_weights"] += shape.total_params * setup.base_bytes / (N if (setup.zero_stage or 0) >= 3 else 1)
        notes.append(Note("note_ref_model", stage=setup.stage))
    if setup.host:
        notes.append(host_fragmentation_note(setup, comps["activations"] + comps["logits"]))
    if seqs is not setup:
        notes.append(Note("note_pairs", stage=setup.stage, seqs=seqs.micro_batch, batch=setup.micro_batch))
    return MemoryEstimate(components=comps, cpu_bytes=cpu, counts=counts, notes=notes)


def fragmentation_bytes(setup: Setup, token_bytes: float) -> float:
    """Memory held beyond the live bytes, from the token-dependent part: the CUDA caching allocator's share
    (:data:`FRAGMENTATION`), or on the CPU glibc's heap (:data:`HOST_FRAGMENTATION`), at most
    :data:`HOST_GUARD_BOUND` where the heap guard runs (``setup.heap_guard``: ``RunDecisions.heap_guard``)."""
    if not setup.host:
        return FRAGMENTATION * token_bytes
    share = HOST_FRAGMENTATION * token_bytes
    return min(share, HOST_GUARD_BOUND) if setup.heap_guard else share


def host_fragmentation_note(setup: Setup, token_bytes: float) -> Note:
    held = fragmentation_bytes(setup, token_bytes)
    if held < HOST_FRAGMENTATION * token_bytes:
        return Note("note_cpu_heap", gib=held / GiB)
    return Note("note_cpu_share", share=HOST_FRAGMENTATION)


def sequences_setup(setup: Setup) -> Setup:
    """The set-up as the model's layers see it. dpo runs a micro-batch's chosen and rejected sequences in one forward
    pass with gradients (``stages/dpo.py``), so its layers hold twice the sequences (and twice the images of a VLM's
    pairs); ``max_tokens_per_batch`` already counts both sequences of a pair (``train/token_budget.py``). The chunked
    head (``chunked_head.forward_sequence_logps``) then runs once over all of them, one chunk of rows at a time: one
    chunk alive, capped at ``chunk_rows``, where doubling the planned figures afterwards counted two. kto keeps its
    micro-batch: only its examples' forward pass keeps activations, its mismatched KL pairs run under no_grad before it
    (``stages/kto.py``), like the reference forward of both stages, whose transients (one layer, one chunk) are below
    those of the backward pass that follows (``benchmarks/dpo_memory.py`` measures the phases)."""
    if setup.stage != "dpo":
        return setup
    return setup.with_(micro_batch=2 * setup.micro_batch, media_patches=2 * setup.media_patches)


def vision_memory(shape: ModelShape, setup: Setup, comps: dict[str, float], notes: list[Note]) -> None:
    """A VLM's vision (audio) side on top of the language model (``plan/vision_memory.py``, encoder towers
    ``plan/vision_towers.py``): what the tower and projector keep for backward for the micro-batch's patches (encoder
    positions) while the LM runs, and the tower's own forward peak when it exceeds the LM's token-dependent peak (it
    runs first, before the LM holds anything)."""
    v = shape.vision
    if not v.patch_size and not v.tower:
        tower = Note("tower_audio" if v.media == ("audios",) else "tower_vision")
        fixed = Note("tail_fixed", n=v.fixed_tokens) if v.fixed_tokens else None
        notes.append(Note("note_tower", family=v.family, tower=tower, fixed=fixed))
        return
    counts = count_vision(v, setup)
    saved = tower_saved_bytes(v, setup, counts, setup.media_patches)
    peak = tower_forward_peak(v, setup, setup.media_patches, setup.largest_image_patches)
    lm = comps["activations"] + comps["logits"]
    extra = saved + max(0.0, peak - lm)
    comps["activations"] += extra
    comps["fragmentation"] = fragmentation_bytes(setup, comps["activations"] + comps["logits"])
