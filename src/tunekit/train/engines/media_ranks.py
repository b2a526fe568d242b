"""Vision-language models under the engines that shard parameters: every micro-batch must carry media.

DeepSpeed ZeRO-3 and FSDP2 keep each parameter in shards and gather a module's weights (a collective every rank
joins) when that module runs. A vision-language model runs its vision tower (or audio encoder) only for a batch with
media, so when one rank's micro-batch has an image and another rank's has none, the first rank waits in the vision
tower's gather for a rank that never joins it: the job crashes or hangs (measured: ZeRO-3 on 2 CPU ranks, tiny
Qwen2-VL, a text-only sample on rank 1 and an image sample on rank 0 - gloo "Connection reset by peer", SIGABRT).
ZeRO-1/2 keep whole parameters but reduce gradients in buckets every rank fills alike: a trained vision tower or
projector (``freeze_vision_tower`` / ``freeze_multi_modal_projector`` false) gets no gradient on a rank without media,
and the job crashes the same way (measured, projector trained). LLaMA-Factory avoids both by giving a batch without
media a fake image; tunekit refuses the combination before the model loads and names the fix. DDP (which finds unused
parameters) and ZeRO-1/2 with the media parts frozen (the defaults) take mixed data (measured).
"""

from __future__ import annotations

from ...config.problems import Said, config_error
from ...config.schema import Config
from ...data.media_columns import MEDIA_COLUMNS
from .distributed import engine_plan


def samples_without_media(dataset) -> int:
    """How many samples of ``dataset`` have no image, video or audio (0 for a dataset without media columns)."""
    if dataset is None:
        return 0
    columns = [c for c in MEDIA_COLUMNS if c in dataset.column_names]
    if not columns:
        return 0
    lists = [dataset[c] for c in columns]
    return sum(1 for row in zip(*lists) if not any(row))


def check_media_on_every_rank(cfg: Config, data) -> None:
    """Refuse a multimodal dataset with text-only samples under ZeRO-3 or FSDP2 on more than one rank (module doc)."""
    if getattr(data, "mm", None) is None:
        return
    plan = engine_plan(cfg)
    if plan.world_size < 2 or plan.engine not in ("fsdp", "deepspeed"):
        return
    sharded = plan.engine == "fsdp" or plan.zero_stage == 3
    trained_media_part = not (cfg.freeze_vision_tower and cfg.freeze_multi_modal_projector)
    if not sharded and not trained_media_part:
        return
    engine = f"deepspeed {cfg.deepspeed}" if plan.engine == "deepspeed" else f"fsdp {cfg.fsdp}"
    for split, dataset in (("training", data.train), ("evaluation", data.eval)):
        missing = samples_without_media(dataset)
        if not missing:
            continue
        where = Said(
            "part_media_ranks_where",
            engine=engine,
            ranks=plan.world_size,
            count=missing,
            total=len(dataset),
            split=Said(f"part_split_{split}"),
        )
        if sharded:
            raise config_error("media_ranks_sharded", (plan.engine,), where=where)
        raise config_error(
            "media_ranks_tower_trains", ("freeze_vision_tower", "freeze_multi_modal_projector"), where=where
        )
