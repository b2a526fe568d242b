"""A predict run's errors (the board's Evaluate & predict tab; ``tunekit predict``) and the vLLM backend's refusal (the
Chat tab's Load), said in the page's language. Each is keyed (``config/problem_texts_predict.py``,
``config/problem_texts_infer.py``); the English is unchanged word for word, the Chinese
(``webui/problems_zh_predict.py``, ``webui/problems_zh_infer.py``) has no untranslated English
(``tests/zh_words.py``)."""

from __future__ import annotations

import importlib.util
import json
import re
import string
from types import SimpleNamespace

import pytest

from tests.helpers import write_dataset
from tests.zh_words import option_words, said_in_both, untranslated
from tunekit.config import load_config
from tunekit.config.problem_texts_api import ENGLISH_API
from tunekit.config.problem_texts_infer import ENGLISH_INFER
from tunekit.config.problem_texts_predict import ENGLISH_PREDICT
from tunekit.errors import ConfigError, DataError, EnvironmentProblem
from tunekit.webui.problems_zh import ZH, say

ALLOWED = option_words()
HAN = re.compile(r"[\u4e00-\u9fff]")
SKIP = "; set bad_records: skip to skip invalid records)"


def _cfg(tmp_path, **options):
    values = dict(model_name_or_path=str(tmp_path / "no-model"), template="qwen", dataset_dir=str(tmp_path / "data"))
    return load_config(None, {**values, **options})


@pytest.mark.parametrize("key", [*ENGLISH_PREDICT, "infer_vllm_missing", "infer_vllm_not_served", *ENGLISH_API])
def test_every_predict_vllm_and_api_media_template_is_chinese(key):
    """Every key, its placeholders filled with a number, is Chinese with no untranslated English but image formats
    (also the ones a cheap test cannot reach: vllm installed, a video without PyAV)."""
    assert key in ENGLISH_PREDICT or key in ENGLISH_INFER or key in ENGLISH_API
    names = {name for _t, name, _s, _c in string.Formatter().parse(ZH[key]) if name}
    text = ZH[key].format(**dict.fromkeys(names, 1))
    assert HAN.search(text), key
    assert untranslated(text, ALLOWED | {"PNG", "JPEG", "WebP", "GIF", "BMP"}) == [], (key, text)


def test_predict_needs_data(tmp_path):
    from tunekit.infer.predict import load_samples

    with pytest.raises(ConfigError) as err:
        load_samples(_cfg(tmp_path))
    said_in_both(
        err.value,
        "predict needs data: set eval_dataset (or dataset) to dataset name(s) from dataset_info.json.",
        "预测需要数据：请把 eval_dataset（或 dataset）设为 dataset_info.json 中的数据集名称。",
    )
    assert err.value.problems[0].fields == ("eval_dataset", "dataset")


def test_predict_needs_an_output_dir(tmp_path):
    from tunekit.infer.predict import run_predict

    with pytest.raises(ConfigError) as err:  # before any data is read or a model loaded
        run_predict(_cfg(tmp_path, eval_dataset="toy"))
    said_in_both(
        err.value,
        "output_dir is not set: name the folder for generated_predictions.jsonl and predict_results.json.",
        "未设置 output_dir：请指定保存 generated_predictions.jsonl 和 predict_results.json 的目录。",
    )
    assert err.value.problems[0].fields == ("output_dir",)


def test_an_invalid_record_and_no_usable_samples(tmp_path):
    """The record's own error (keyed by the data layer: said in Chinese too) in the Chinese sentence; with
    bad_records: skip and every record invalid, none is left to predict on."""
    from tunekit.infer.predict import load_samples

    write_dataset(tmp_path / "data", "toy", [{"instruction": "", "input": "", "output": "4"}])
    with pytest.raises(DataError) as err:
        load_samples(_cfg(tmp_path, eval_dataset="toy"))
    path = tmp_path / "data" / "toy.json"
    said_in_both(
        err.value,
        f"{path}, record 0: the prompt is empty. (dataset 'toy'{SKIP}",
        f"{path} 中的记录 0：提示为空。（数据集 'toy'；设置 bad_records: skip 可跳过无效记录）",
    )
    with pytest.raises(DataError) as err:
        load_samples(_cfg(tmp_path, eval_dataset="toy", bad_records="skip"))
    said_in_both(err.value, "no usable samples in toy to predict on.", "toy 中没有可用于预测的样本。")


def test_a_multimodal_prompt_longer_than_cutoff_len(tmp_path, monkeypatch):
    """The length check of predict's media prompts (the rendered ids stand in for a vision-language model's)."""
    from tunekit.infer import predict

    monkeypatch.setattr(predict, "render_sample", lambda *args: (list(range(9)), {"pixel_values": None}))
    sample = {"messages": [], "system": None, "tools": None, "media": {"images": ["a.png"]}, "where": "toy.json, #0"}
    with pytest.raises(DataError) as err:
        predict._render_prompts(SimpleNamespace(cutoff_len=8), None, [sample])
    said_in_both(
        err.value,
        "toy.json, #0: the prompt with its media is 9 tokens, longer than cutoff_len 8, and cutting it would cut "
        "through its media tokens: raise cutoff_len, or lower image_max_pixels / video_max_pixels.",
        "toy.json, #0：带媒体的提示长 9 个 token，超过 cutoff_len 8，而截断会切断其中的媒体 token：请调大 cutoff_len，"
        "或调小 image_max_pixels / video_max_pixels。",
    )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_the_chat_tabs_load_with_infer_backend_vllm(tmp_path):
    """The Chat tab's Load (``ChatSession.load``, whose error the tab shows with ``say_error``) refuses the vLLM
    backend before loading anything."""
    from tunekit.webui.chat import ChatSession

    with pytest.raises(EnvironmentProblem) as err:
        ChatSession().load(_cfg(tmp_path, infer_backend="vllm"))
    said_in_both(
        err.value,
        "infer_backend: vllm needs the vllm package (pip install vllm, on a machine with an NVIDIA GPU); or use "
        "infer_backend: huggingface (the default).",
        "infer_backend: vllm 需要 vllm 包（`pip install vllm`，在有 NVIDIA GPU 的机器上安装）；或使用 "
        "infer_backend: huggingface（默认）。",
    )


def test_the_apis_media_refusals_are_keyed_and_english(tmp_path):
    """The API's refusals (``serve/media.py``) stay English in the response body, word for word, and are keyed."""
    from tunekit.serve.media import MediaPolicy, MediaSource, fetch
    from tunekit.serve.request_checks import APIError

    part = SimpleNamespace(type="image_url", image_url="https://example.com/cat.png")
    with pytest.raises(APIError) as err:
        fetch(MediaSource("images", part, "messages[0].content[1]"), MediaPolicy(), tmp_path, 0)
    english = (
        "messages[0].content[1]: https URLs are refused: tunekit api fetches nothing from the network. Send the image "
        "inline as a data: URL (base64), or as a file under api_media_dir."
    )
    assert json.loads(err.value.response().body)["error"]["message"] == english
    assert say(err.value.message, "zh") == (
        "messages[0].content[1]：拒绝 https URL：`tunekit api` 不从网络获取任何内容。请以 `data:` URL（base64）内联"
        "发送该图片，或作为 api_media_dir 下的文件发送。"
    )
    with pytest.raises(ConfigError) as err:
        MediaPolicy.from_config(SimpleNamespace(api_media_dir=str(tmp_path / "nope"), api_max_media_mb=20))
    said_in_both(
        err.value,
        f"api_media_dir '{tmp_path / 'nope'}' is not a folder: create it, or unset api_media_dir (then requests send "
        "media inline as base64 data: URLs only).",
        f"api_media_dir '{tmp_path / 'nope'}' 不是文件夹：请创建它，或取消设置 api_media_dir（此时请求只能以 base64 "
        "`data:` URL 内联发送媒体）。",
    )
    assert err.value.problems[0].fields == ("api_media_dir",)


def _refusals(tmp_path, lang: str) -> list[str]:
    """The chat's note for each refused upload: no model, a text-only model, a file gone, too large, not an image."""
    from tunekit.webui.chat import ChatSession

    def refusal(image):
        *_, last = session.turn(None, "hi", str(image), lang=lang)
        assert last["messages"] == [] and last["images"] == []
        return last["shown"][-1]["content"]

    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n not really a picture".ljust(2000, b"."))
    session = ChatSession(max_upload_bytes=1000)
    said = [refusal(image)]
    session.engine = SimpleNamespace(mm=None, cfg=SimpleNamespace(template="qwen"))
    said.append(refusal(image))
    session.engine = SimpleNamespace(mm=object(), cfg=SimpleNamespace(template="qwen2_vl"))
    said += [refusal(tmp_path / "gone.png"), refusal(image)]
    session.max_upload_bytes = 10_000
    return [*said, refusal(image)]


def test_the_chat_tabs_upload_refusals_in_both_languages(tmp_path):
    """The board's chat checks an upload itself (``webui/chat.py``; the API's media checks, ``serve/media.py``, are
    the API's and never reach the board) and says each refusal in the page's language."""
    assert _refusals(tmp_path, "en") == [
        "⚠ Load a model first (Load model).",
        "⚠ cat.png: the loaded model is text-only (template 'qwen') and cannot see images. Load a vision-language "
        "model with its multimodal template (e.g. qwen2_vl for Qwen2-VL / Qwen2.5-VL), or remove the image and send "
        "the text alone.",
        "⚠ gone.png: the uploaded file is gone; upload it again.",
        "⚠ cat.png is 2.0 kB, over the board's upload limit of 1.0 kB: send a smaller image (downscale or compress "
        "it).",
        "⚠ cat.png cannot be read as an image (the file is corrupt or not an image): upload a PNG, JPEG or WebP file.",
    ]
    zh = _refusals(tmp_path, "zh")
    assert zh == [
        "⚠ 请先加载模型（“加载模型”）。",
        "⚠ cat.png：已加载的是纯文本模型（模板 'qwen'），无法读取图像。请加载视觉语言模型并使用其多模态模板"
        "（如 Qwen2-VL / Qwen2.5-VL 用 qwen2_vl），或移除图像后只发送文本。",
        "⚠ gone.png：上传的文件已不存在，请重新上传。",
        "⚠ cat.png 大小为 2.0 kB，超过面板的上传上限 1.0 kB：请发送更小的图像（缩小或压缩）。",
        "⚠ cat.png 无法作为图像读取（文件已损坏或不是图像）：请上传 PNG、JPEG 或 WebP 文件。",
    ]
    for text in zh:
        assert untranslated(text, ALLOWED | {"cat.png", "gone.png", "qwen", "kB", "PNG", "JPEG", "WebP"}) == [], text


EMPTY = [{"instruction": "", "input": "", "output": "4"}]  # an invalid record: its prompt is empty


def test_the_data_errors_an_evaluation_run_hits_first(tiny_qwen, tmp_path):
    """An Evaluate & predict run reads its data through the pipeline before predict does (``data/pipeline.py``): an
    invalid record, and a dataset with none usable; the record's own error (the data layer's) is keyed too."""
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    write_dataset(tmp_path / "data", "toy", EMPTY)
    cfg = _cfg(tmp_path, model_name_or_path=str(tiny_qwen), do_train=False, do_eval=True, eval_dataset="toy")
    path = tmp_path / "data" / "toy.json"
    record, record_zh = f"{path}, record 0: the prompt is empty.", f"{path} 中的记录 0：提示为空。"
    with pytest.raises(DataError) as err:
        prepare_datasets(cfg, load_tokenizer(cfg), "sft")
    said_in_both(
        err.value,
        f"{record} (dataset 'toy'; set bad_records: skip to skip invalid records and count them)",
        f"{record_zh}（数据集 'toy'；设置 bad_records: skip 可跳过无效记录并计数）",
    )
    cfg = cfg.model_copy(update={"bad_records": "skip"})
    with pytest.raises(DataError) as err:
        prepare_datasets(cfg, load_tokenizer(cfg), "sft")
    said_in_both(
        err.value,
        f"dataset 'toy' ({path}) has no usable records (1 read, 1 invalid). First problem: {record}",
        f"数据集 'toy'（{path}）没有可用的记录（读取 1 条，无效 1 条）。第一个问题：{record_zh}",
    )


def test_a_failed_jobs_keyed_reason_is_said_in_chinese(tiny_qwen, tmp_path):
    """The Evaluate & predict tab's job (``tunekit train do_train=false do_predict=true``, failing on its data) hands
    its keyed error to the board (``$TUNEKIT_ERROR_FILE``): the Chinese status line says it after the lead-in, above
    the log's own English line; the English status line is the log's line alone, as before."""
    from tunekit.webui.board import Board
    from tunekit.webui.paths import PathPolicy

    write_dataset(tmp_path / "data", "toy", EMPTY)
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, [tiny_qwen], caches=[]))
    out = tmp_path / "saves" / "eval"
    values = dict(
        model_name_or_path=str(tiny_qwen),
        template="qwen",
        do_train=False,
        do_predict=True,
        dataset_dir=str(tmp_path / "data"),
        eval_dataset="toy",
        output_dir=str(out),
    )
    job = board.start_job("train", values, out, kind="eval")
    assert board.runner.wait(300) == 2
    path = tmp_path / "data" / "toy.json"
    record = f"{path}, record 0: the prompt is empty."
    where = {"key": "part_where_record", "values": {"file": str(path), "index": 0}}
    empty = {"key": "record_empty_prompt", "values": {"where": where}}
    assert json.loads(job.error_path.read_text(encoding="utf-8")) == [
        {"key": "data_bad_record", "values": {"error": empty, "name": "toy"}}
    ]
    log_line = f"error: {record} (dataset 'toy'; set bad_records: skip to skip invalid records and count them)"
    assert board.job_view("en")["status"] == f"**failed** · `tunekit train` · {out} · exit 2\n\n```\n{log_line}\n```"
    assert board.job_view("zh")["status"] == (
        f"**失败** · `tunekit train` · {out} · 退出码 2\n\n任务失败：{path} 中的记录 0：提示为空。（数据集 'toy'；"
        f"设置 bad_records: skip 可跳过无效记录并计数）\n\n```\n{log_line}\n```"
    )
