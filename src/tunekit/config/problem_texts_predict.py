"""The English templates of the errors of a predict run (``tunekit predict``, ``do_predict``: the board's Evaluate &
predict tab, ``infer/predict.py``): key → template, part of :data:`tunekit.config.problem_texts.ENGLISH`. The board
says each again in Chinese (``webui/problems_zh_predict.py``); the CLI says the English.

A ``ConfigError`` carries its problem (:func:`~tunekit.config.problems.config_error`), a ``DataError`` its
:class:`~tunekit.config.problems.Said`. ``{error}`` (``{problem}``) is a record's own error: a keyed
message where the data layer keys it, else its text as it is.
"""

from __future__ import annotations

ENGLISH_PREDICT: dict[str, str] = {
    "predict_no_data": "predict needs data: set eval_dataset (or dataset) to dataset name(s) from dataset_info.json.",
    "predict_no_output_dir": "output_dir is not set: name the folder for generated_predictions.jsonl and "
    "predict_results.json.",
    "predict_bad_record": "{error} (dataset '{name}'; set bad_records: skip to skip invalid records)",
    "predict_no_samples": "no usable samples in {names} to predict on.",
    # the data a run reads first (data/pipeline.py: what the Evaluate & predict tab's run, and training, hit)
    "data_bad_record": "{error} (dataset '{name}'; set bad_records: skip to skip invalid records and count them)",
    "data_no_usable_records": "dataset '{name}' ({path}) has no usable records ({read} read, {invalid} "
    "invalid).{first}",
    "part_first_problem": " First problem: {problem}",
    "predict_media_too_long": "{where}: the prompt with its media is {tokens} tokens, longer than cutoff_len "
    "{cutoff_len}, and cutting it would cut through its media tokens: raise cutoff_len, or lower image_max_pixels / "
    "video_max_pixels.",
}
