"""``tunekit predict CONFIG.yaml [key=value ...]``: generate for a dataset and score it (BLEU-4, ROUGE,
exact match)."""

from __future__ import annotations

import sys

from tunekit.infer.predict import run_predict

from .args import config_and_flags

HELP = """usage: tunekit predict [CONFIG.yaml] [key=value ...]

Generate a reply for every sample of eval_dataset (else dataset) — max_samples, per_device_eval_batch_size,
left-padded batches — with the model (+ adapter_name_or_path) and write to output_dir:
  generated_predictions.jsonl   {"prompt", "predict", "label"} per sample (LLaMA-Factory's field names)
  predict_results.json          predict_bleu-4, predict_rouge-1/2/l (jieba word segmentation, as
                                LLaMA-Factory), predict_exact_match, tokens/s
Generation options: max_new_tokens, do_sample, temperature, top_p, top_k, repetition_penalty, num_beams.
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    _, cfg = config_and_flags(argv, ())
    run_predict(cfg)
    return 0
