"""The export checks' problems said in Chinese on the board (``config/problem_texts_export.py``,
``webui/problems_zh_export.py``): ``export/verify.py`` and ``export/gptq_check.py`` report each problem keyed and the
failed export's error takes them as a tuple, so a failed export job's line is Chinese through and through; the
English (the report's JSON, ``tunekit verify``'s lines, the CLI's error) is unchanged byte for byte."""

from __future__ import annotations

import json
import string

import pytest

from tests.helpers import ROOT, failed_job
from tests.zh_words import HAN, option_words, said_in_both, unkeyed_messages, untranslated, value_words
from tunekit.config.problem_texts import ENGLISH
from tunekit.config.problem_texts_export import ENGLISH_EXPORT, JOINS_EXPORT
from tunekit.config.problems import Said
from tunekit.errors import ModelError
from tunekit.export.media import PROCESSOR_CORE
from tunekit.messages import placeholders
from tunekit.webui.problems_zh import say
from tunekit.webui.problems_zh_export import JOINS_ZH_EXPORT, ZH_EXPORT

ALLOWED = option_words()
SRC = ROOT / "src" / "tunekit"
MODULES = (
    "export/verify.py",
    "export/verify_media.py",
    "export/gguf_verify.py",
    "export/exporter.py",
    "export/gptq_check.py",
    "cli/verify_cmd.py",
)


def test_the_export_checks_report_their_problems_keyed():
    """A problem written as a literal or f-string could not be said in Chinese: each is a :class:`Said` whose key has
    an English template."""
    found = {name: unkeyed_messages(SRC / name, ENGLISH) for name in MODULES}
    assert {name: lines for name, lines in found.items() if lines != ([], [])} == {}


def test_every_export_key_has_a_chinese_template_with_the_same_placeholders_and_joins():
    """(``tests/webui/test_problems_zh.py`` holds the merged tables to the same; this names the export's own.)"""
    assert set(ZH_EXPORT) == set(ENGLISH_EXPORT)
    assert {k: placeholders(v) for k, v in ZH_EXPORT.items()} == {
        k: placeholders(v) for k, v in ENGLISH_EXPORT.items()
    }
    assert set(JOINS_ZH_EXPORT) == set(JOINS_EXPORT)


@pytest.mark.parametrize("key", sorted(ENGLISH_EXPORT))
def test_every_export_template_is_chinese(key):
    """Every key, its placeholders filled with a number, has Chinese words and no untranslated English (code, file
    and option names stay as they are)."""
    names = {name for _t, name, _s, _c in string.Formatter().parse(ZH_EXPORT[key]) if name}
    text = ZH_EXPORT[key].format(**dict.fromkeys(names, 1))
    assert untranslated(text, ALLOWED) == [], (key, text)
    assert HAN.search(text), (key, text)


GGUF_PROMPT = "<|im_start|>user\nHi"


def _detail() -> Said:
    return Said("part_verify_merged_logits", diff=3.25e-3, positions=17, dtype="float32", effect=0.5)


def _greedy() -> Said:
    return Said("part_verify_gguf_greedy", kind="q8_0", steps=16, diff=0.25, bound=0.125, same=15, judged=12)


# each problem as it is said now, and the English the checks wrote before they were keyed (the old f-strings)
SAID_BEFORE = [
    (
        Said("verify_no_config", path="/x"),
        "/x has no config.json: it is not a model folder (give the export_dir of `tunekit export`).",
    ),
    (
        Said("verify_no_weights", path="/x", index="model.safetensors.index.json"),
        "no weight files in /x (model.safetensors or model.safetensors.index.json)",
    ),
    (
        Said("verify_missing_shards", shards=("a.safetensors", "b.safetensors")),
        "the index names missing shard file(s): a.safetensors, b.safetensors",
    ),
    (
        Said("verify_tensor_twice", tensor="lm_head.weight", first="a.safetensors", second="b.safetensors"),
        "tensor lm_head.weight is stored twice (a.safetensors and b.safetensors)",
    ),
    (
        Said("verify_shard_too_big", shard="a.safetensors", size=1234567, limit=0.0003),
        f"shard a.safetensors is {1234567:,} bytes, over export_size {0.0003} GB",
    ),
    (
        Said("verify_index_mismatch", extra=str(["x"]), absent=str([])),
        f"the index does not match the shards (not indexed: {['x']}, indexed but absent: {[]})",
    ),
    (
        Said("verify_load_failed", path="/x", error="Error no file named model.safetensors"),
        "plain transformers cannot load /x: Error no file named model.safetensors",
    ),
    (
        Said("verify_load_keys", reported=(f"missing_keys: {['a', 'b']}", f"unexpected_keys: {['c']}")),
        "transformers reported missing_keys: ['a', 'b'], unexpected_keys: ['c']",
    ),
    (
        Said(
            "verify_shape_mismatch",
            shapes=(
                Said("part_verify_shape", tensor="w", saved=str((2, 3)), model=str((3, 2))),
                Said("part_verify_renamed", count=4),
            ),
        ),
        f"shape mismatch: w: saved {(2, 3)}, model {(3, 2)}; the 4 tensors saved under other names than the model's "
        "do not have the shapes of its remaining tensors",
    ),
    (
        Said("verify_dtype_mismatch", declared="bfloat16", held=str(["float32"])),
        f"config.json declares dtype bfloat16 but the shards hold {['float32']}",
    ),
    (Said("verify_no_chat_template"), "the tokenizer has no chat_template: apply_chat_template cannot render prompts"),
    (
        Said("verify_template_differs", template="qwen", saved=repr("<a>"), ours=repr("<b>")),
        f"the saved chat_template renders differently from tunekit's 'qwen' template: {'<a>'!r} vs {'<b>'!r}",
    ),
    (Said("verify_no_tokens"), "generate produced no tokens"),
    (Said("verify_not_merged"), "the exported weights equal the base model: the adapter was not merged"),
    (
        Said("verify_merged_logits_above", detail=_detail(), bound=1e-4),
        f"max |merged - (base + adapter)| = {3.25e-3:.3e} over 17 positions (float32 export; the adapter moves logits "
        f"by up to {0.5:.3e}), above {1e-4:g}",
    ),
    (
        Said("verify_adapter_no_base"),
        "adapter_config.json names no base_model_name_or_path: the adapter cannot be loaded",
    ),
    (
        Said("verify_adapter_base_missing", base="org/base"),
        "the base model org/base named by the adapter is not a local folder here nor cached",
    ),
    (
        Said("verify_adapter_no_effect", detail=Said("part_verify_adapter_logits", diff=0.0, effect=0.0)),
        f"max |exported - trained adapter| = {0.0:.3e} (the adapter moves logits by up to {0.0:.3e}): the adapter has "
        "no effect",
    ),
    (
        Said(
            "verify_adapter_logits_above", detail=Said("part_verify_adapter_logits", diff=0.25, effect=0.5), bound=1e-4
        ),
        f"max |exported - trained adapter| = {0.25:.3e} (the adapter moves logits by up to {0.5:.3e}), above {1e-4:g}",
    ),
    (
        Said("verify_media_no_prompt", path="/x", error="KeyError: 'image_token'"),
        "tunekit cannot render an image/audio prompt for /x (KeyError: 'image_token')",
    ),
    (
        Said(
            "verify_media_no_processor_files",
            path="/x",
            absent_files=(
                "chat_template.json",
                Said("part_verify_either", one="preprocessor_config.json", other="processor_config.json"),
            ),
        ),
        f"/x has no {', '.join(['chat_template.json', ' or '.join(PROCESSOR_CORE)])}: AutoProcessor cannot load the "
        f"vision/audio processor of this model. Copy the base model's processor files into it (AutoProcessor."
        f"from_pretrained(base).save_pretrained(folder)), or export again with tunekit export.",
    ),
    (
        Said("verify_media_processor_failed", path="/x", error="Unrecognized processing class"),
        "AutoProcessor cannot load /x: Unrecognized processing class",
    ),
    (
        Said(
            "verify_media_prompt_differs",
            conversation=Said("part_verify_media_conversation"),
            template="qwen2_vl",
            token=7,
            official=repr("<|vision_start|>"),
            ours=repr("<|im_start|>"),
        ),
        f"on the image/audio conversation the processor's official rendering and tunekit's 'qwen2_vl' differ from "
        f"token 7: {'<|vision_start|>'!r} vs {'<|im_start|>'!r}",
    ),
    (
        Said(
            "verify_media_prompt_differs",
            conversation=Said("part_verify_text_conversation"),
            template="llava",
            token=0,
            official="'a'",
            ours="'b'",
        ),
        "on a text conversation the processor's official rendering and tunekit's 'llava' differ from token 0: 'a' vs "
        "'b'",
    ),
    (
        Said(
            "verify_media_tensors_differ",
            tensor_names=("pixel_values", "image_grid_thw"),
            media=Said("part_verify_image"),
        ),
        "the processor's pixel_values, image_grid_thw differ from tunekit's for the same image",
    ),
    (
        Said("verify_media_tensors_differ", tensor_names=("input_features",), media=Said("part_verify_audio")),
        "the processor's input_features differ from tunekit's for the same audio",
    ),
    (
        Said(
            "verify_merged_logits_above",
            detail=Said(
                "part_verify_media_logits",
                diff=2.5e-3,
                positions=40,
                media=Said("part_verify_image"),
                dtype="float32",
                effect=0.75,
            ),
            bound=1e-4,
        ),
        f"max |merged - (base + adapter)| = {2.5e-3:.3e} over 40 positions with the image (float32 export; the "
        f"adapter moves logits by up to {0.75:.3e}), above {1e-4:g}",
    ),
    (
        Said(
            "part_verify_media_logits",
            diff=0.0,
            positions=9,
            media=Said("part_verify_media"),
            dtype="bfloat16",
            effect=0.5,
        ),
        f"max |merged - (base + adapter)| = {0.0:.3e} over 9 positions with the media (bfloat16 export; the adapter "
        f"moves logits by up to {0.5:.3e})",
    ),
    (
        Said(
            "verify_media_greedy_differs",
            token=3,
            merged=str([1, 2, 3, 9]),
            adapter=str([1, 2, 3, 4]),
            margin=0.5,
            diff=1e-3,
        ),
        f"greedy ids differ from base + adapter's from token 3 ({[1, 2, 3, 9]} vs {[1, 2, 3, 4]}), though the two "
        f"best logits there are {0.5:.2e} apart, more than twice the logit difference {1e-3:.2e}",
    ),
    (
        Said("verify_gguf_missing", file="model-f16.gguf", path="/x"),
        "the GGUF file model-f16.gguf named in tunekit_export.json is not in /x",
    ),
    (
        Said("verify_gguf_unreadable", file="model-f16.gguf", error="GGUF magic invalid"),
        "the gguf package cannot read model-f16.gguf: GGUF magic invalid",
    ),
    (
        Said("verify_gguf_load_failed", file="model-f16.gguf", error="Failed to load model from file"),
        "llama.cpp cannot load model-f16.gguf: Failed to load model from file",
    ),
    (
        Said(
            "verify_gguf_tokens_differ",
            text_kind=Said("part_verify_gguf_prompt"),
            token=4,
            ours=str([5, 6]),
            trained=str([5, 7]),
            ours_count=30,
            trained_count=31,
            text=repr(GGUF_PROMPT),
        ),
        f"llama.cpp tokenizes the chat-templated prompt differently from training: first difference at token 4 "
        f"(llama.cpp {[5, 6]}, training {[5, 7]}; 30 vs 31 tokens) in {GGUF_PROMPT!r}",
    ),
    (
        Said(
            "verify_gguf_logits_above",
            detail=Said(
                "part_verify_gguf_logits",
                kind="f16",
                diff=0.125,
                bound=0.0625,
                stages=9,
                adapter_effect=Said("part_verify_gguf_effect", effect=2.0),
            ),
        ),
        f"f16: max |llama.cpp - transformers| over the next-token logits = {0.125:.3e}, bound {0.0625:.3e} "
        f"(first-order, 9 rounded stages; gguf_verify.py); the adapters move these logits by up to {2.0:.3e}: above "
        "the bound",
    ),
    (
        Said("part_verify_gguf_logits", kind="bf16", diff=0.0, bound=0.5, stages=5, adapter_effect=None),
        f"bf16: max |llama.cpp - transformers| over the next-token logits = {0.0:.3e}, bound {0.5:.3e} (first-order, "
        "5 rounded stages; gguf_verify.py)",
    ),
    (
        Said(
            "verify_gguf_greedy_above",
            detail=_greedy(),
            at_steps=str([2, 5]),
        ),
        f"q8_0: transformers' greedy continuation of 16 tokens: max |llama.cpp - transformers| {0.25:.3e} (bound at "
        f"that step {0.125:.3e}); llama.cpp's top-1 equals transformers' at 15/16 steps, 12 of them judged (top-1 "
        f"margin above twice the bound), the rest counted: logits above the bound at step(s) {[2, 5]}",
    ),
    (
        Said("verify_gguf_greedy_top1", detail=_greedy(), at_steps=str([5])),
        f"q8_0: transformers' greedy continuation of 16 tokens: max |llama.cpp - transformers| {0.25:.3e} (bound at "
        f"that step {0.125:.3e}); llama.cpp's top-1 equals transformers' at 15/16 steps, 12 of them judged (top-1 "
        f"margin above twice the bound), the rest counted: a different top-1 at judged step(s) {[5]}",
    ),
    (
        Said("verify_gguf_no_template"),
        "the GGUF has no tokenizer.chat_template: llama.cpp runtimes cannot render chat prompts",
    ),
    (
        Said("verify_gguf_template_differs", rendered=repr("<a>"), template="qwen", ours=repr("<b>")),
        "the GGUF's chat template (tokenizer.chat_template, what llama.cpp runtimes render with) renders "
        f"{'<a>'!r}, tunekit's 'qwen' template {'<b>'!r}",
    ),
    (Said("gptq_check_no_layers"), "no quantized layer (weight_packed) in the export"),
    (
        Said("gptq_check_reload_differs", mismatch=0.0123456),
        f"the reloaded model's logits differ from those of its stored weights by up to {0.0123456:.3g} (the folder "
        "does not reload to the weights it holds)",
    ),
    (
        Said("gptq_check_above_rtn", error=0.23456, rtn=0.1875),
        f"the logits' relative RMS error on the calibration texts, {0.23456:.4f}, exceeds round-to-nearest's "
        f"{0.1875:.4f} on the same grid",
    ),
]


@pytest.mark.parametrize(("said", "before"), SAID_BEFORE, ids=[s.key for s, _ in SAID_BEFORE])
def test_each_problem_reads_as_before_and_is_said_in_chinese(said, before):
    """The English byte for byte as the check's f-string wrote it; the report's JSON writes the same text; the board
    says it in Chinese with no English left but its values."""
    assert said == before
    assert json.dumps({"problems": [said]}, indent=2) == json.dumps({"problems": [before]}, indent=2)
    zh = say(said, "zh")
    assert HAN.search(zh) and untranslated(zh, ALLOWED | value_words(said)) == [], zh


def test_a_failed_check_with_two_problems_joins_them_in_each_language():
    """The failed export's error takes the problems as a tuple: "; " in English (what the CLI always printed), "；"
    on the Chinese board."""
    problems = (Said("verify_missing_shards", shards=("a.safetensors",)), Said("verify_no_tokens"))
    said_in_both(
        ModelError(Said("export_verify_failed", path="/out", problems=problems)),
        "the export in /out failed verification: the index names missing shard file(s): a.safetensors; generate "
        "produced no tokens",
        "/out 中的导出未通过校验：索引中列出的分片文件不存在：a.safetensors；`generate` 没有生成任何 token",
    )
    said_in_both(
        ModelError(Said("gptq_check_failed", path="/q", problems=(Said("gptq_check_no_layers"),))),
        "the GPTQ export in /q failed its check: no quantized layer (weight_packed) in the export",
        "/q 中的 GPTQ 导出未通过检查：导出中没有量化层（weight_packed）",
    )


def test_an_export_whose_check_fails_fails_its_job_with_a_chinese_reason(tiny_qwen, tmp_path, monkeypatch, capsys):
    """The board's route end to end: ``tunekit export`` whose written folder loses its one shard before the check
    runs: the check reports the missing shard, the CLI prints the English as before, the error file holds the keyed
    error with the problem inside it, and the board's line is Chinese, the file name as it is."""
    from tunekit.export import exporter

    written_index = exporter.ensure_index

    def index_then_lose_the_shard(folder):
        index = written_index(folder)
        (folder / "model.safetensors").unlink()
        return index

    monkeypatch.setattr(exporter, "ensure_index", index_then_lose_the_shard)
    out = tmp_path / "export"
    argv = ["export", f"model_name_or_path={tiny_qwen}", "template=qwen", f"export_dir={out}"]
    line, written, zh = failed_job(argv, tmp_path, monkeypatch, capsys)
    said = Said(
        "export_verify_failed", path=str(out), problems=(Said("verify_missing_shards", shards=("model.safetensors",)),)
    )
    assert line == f"error: the export in {out} failed verification: the index names missing shard file(s): " + (
        "model.safetensors"
    )
    assert line == f"error: {said}" and written == [said.to_json()]
    assert zh == f"{out} 中的导出未通过校验：索引中列出的分片文件不存在：model.safetensors"
    assert untranslated(zh, ALLOWED | value_words(said)) == [], zh


def test_a_verify_job_whose_check_fails_leaves_a_chinese_reason(tmp_path, monkeypatch, capsys):
    """``tunekit verify`` as the board runs it, on a folder whose index names two shards that are not there: the
    report is printed and the exit code is 1 as before (no "error:" line: the report is the output), and the error
    file holds the failed check's keyed error, which the board says in Chinese, the file names as they are."""
    from tunekit.cli.verbs import dispatch
    from tunekit.env import ERROR_FILE_ENV
    from tunekit.webui.problems_zh import say_job_error

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"a.weight": shards[0], "b.weight": shards[1]}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    error_file = tmp_path / "job.error.json"
    monkeypatch.setenv(ERROR_FILE_ENV, str(error_file))

    assert dispatch(["verify", str(folder)]) == 1
    out, err = capsys.readouterr()
    assert f"  problem: the index names missing shard file(s): {shards[0]}, {shards[1]}\n" in out and err == ""
    said = Said("export_verify_failed", path=str(folder), problems=(Said("verify_missing_shards", shards=shards),))
    assert json.loads(error_file.read_text(encoding="utf-8")) == [said.to_json()]
    zh = say_job_error(error_file, "zh")
    assert zh == f"{folder} 中的导出未通过校验：索引中列出的分片文件不存在：{shards[0]}、{shards[1]}"
    assert untranslated(zh, ALLOWED | value_words(said)) == [], zh
