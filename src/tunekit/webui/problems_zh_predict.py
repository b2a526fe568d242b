"""The errors of a predict run in Chinese (the board's Evaluate & predict tab): one template per key
of :data:`tunekit.config.problem_texts_predict.ENGLISH_PREDICT`, the same placeholders
(``tests/webui/test_problems_zh.py`` holds every key to one); option names, values, paths and code stay as they are."""

from __future__ import annotations

ZH_PREDICT: dict[str, str] = {
    "predict_no_data": "预测需要数据：请把 eval_dataset（或 dataset）设为 dataset_info.json 中的数据集名称。",
    "predict_no_output_dir": "未设置 output_dir：请指定保存 generated_predictions.jsonl 和 predict_results.json "
    "的目录。",
    "predict_bad_record": "{error}（数据集 '{name}'；设置 bad_records: skip 可跳过无效记录）",
    "predict_no_samples": "{names} 中没有可用于预测的样本。",
    "data_bad_record": "{error}（数据集 '{name}'；设置 bad_records: skip 可跳过无效记录并计数）",
    "data_no_usable_records": "数据集 '{name}'（{path}）没有可用的记录（读取 {read} 条，无效 {invalid} 条）。{first}",
    "part_first_problem": "第一个问题：{problem}",
    "predict_media_too_long": "{where}：带媒体的提示长 {tokens} 个 token，超过 cutoff_len {cutoff_len}，而截断会切断"
    "其中的媒体 token：请调大 cutoff_len，或调小 image_max_pixels / video_max_pixels。",
}
