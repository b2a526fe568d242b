"""``tunekit data stats CONFIG.yaml [key=value ...] [--plot PATH] [--json]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tunekit.config import load_config
from tunekit.config.loader import check_writable_folder
from tunekit.config.problems import Said, config_error
from tunekit.data.lengths import measure_lengths
from tunekit.errors import ConfigError
from tunekit.model.loader import load_tokenizer
from tunekit.plan.batching import batching_stats
from tunekit.plan.planner import world_from
from tunekit.plan.report import print_stats
from tunekit.plan.stats import dataset_stats, plot_cdf

HELP = """usage: tunekit data stats CONFIG.yaml [key=value ...] [--plot [PATH]] [--json]

Tokenize the configured datasets exactly as training does (model tokenizer + template) and report
token lengths per dataset and overall (min/mean/P50/P90/P95/P99/max of the total and of each part),
what cutoff_len truncates, a recommended cutoff_len (multiple of 128 covering P99), trainable tokens,
and padding waste at the current batch size with and without group_by_length / packing.
Batching: for each mode (padded, padded + group_within_step, group_by_length, packing, padding_free, and
max_tokens_per_batch when set) the share of pad tokens and the tokens per optimizer step (per device, with
per_device_train_batch_size x gradient_accumulation_steps), from the real token lengths; the configured mode
is marked. Steps count the rows that train, as tunekit train does: val_size held out with its seeded split,
the micro-batches dealt to torchrun's NPROC_PER_NODE x NNODES ranks (1 without them).
Every stage: sft (prompt, response), rm/dpo (prompt, chosen, rejected and the longer answer, which
decides truncation), kto (prompt, response, desirable/undesirable counts), pt (document lengths, the
blocks packing makes at cutoff_len, tokens kept in the tail blocks or dropped without packing),
ppo/grpo (prompt).
Multimodal data (a vision/audio family template): media tokens per sample (min/mean/max, images, videos
and audio apart; they are part of the total length), and the samples whose media tokens alone exceed
cutoff_len, named by file and record (training drops them: a sample with media is never cut).

  --plot [PATH]   write a CDF plot (PNG; default token_lengths.png)
  --json          print one JSON object
"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(HELP)
        return 0
    if argv[0] != "stats":
        raise ConfigError(Said("cli_data_unknown", command=repr(argv[0])))
    argv = argv[1:]
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    plot = None
    if "--plot" in argv:
        i = argv.index("--plot")
        if i + 1 < len(argv) and argv[i + 1].lower().endswith(".png"):
            plot = argv[i + 1]
            del argv[i : i + 2]
        else:
            plot = "token_lengths.png"
            del argv[i]
    path = argv[0] if argv and not argv[0].startswith("-") and "=" not in argv[0] else None
    rest = argv[1:] if path else argv
    cfg = load_config(path, rest)
    if plot:  # before the data is read: a folder that cannot be written fails now, a missing one is created
        check_writable_folder(Path(plot).expanduser().parent, "--plot")
    if not cfg.dataset:
        raise config_error("cli_data_no_dataset", ("dataset",))
    table = measure_lengths(cfg, load_tokenizer(cfg))
    stats = dataset_stats(
        table,
        cfg.cutoff_len,
        cfg.per_device_train_batch_size,
        cfg.pad_to_multiple_of,
        cfg.preprocessing_batch_size,
        stage=cfg.stage,
        packing=cfg.use_packing,
    )
    stats["batching"] = batching_stats(table, cfg, world_from(None, None)[0])  # torchrun's NPROC_PER_NODE x NNODES
    if plot:
        Path(plot).expanduser().parent.mkdir(parents=True, exist_ok=True)
        stats["plot"] = plot_cdf(table, plot, cfg.cutoff_len, stats["recommended_cutoff_len"])
    if as_json:
        sys.stdout.write(json.dumps(stats, indent=2) + "\n")
    else:
        print_stats(stats)
    return 0
