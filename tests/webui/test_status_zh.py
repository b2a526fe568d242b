"""What the Chinese board still said in English, said in Chinese with the one keyed mechanism: a
failing handler's line (``webui/guard.py``), the memory planner's errors in the plan panel (keyed in ``plan/``, their
templates in ``config/problem_texts_plan.py`` / ``webui/problems_zh_plan.py``), the runner's one-job refusal, the
chat's failed replies and Unload, and the job status lines with a failed job's reason. The English is unchanged; the
Chinese has no untranslated English (``tests/zh_words.py``: option names, values, paths and code stay as they are; a
failed job's reason stays the log's own English, after a Chinese lead-in)."""

from __future__ import annotations

import json
import string
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.zh_words import HAN, option_words, untranslated, value_words
from tunekit.config import build_config
from tunekit.config.problem_texts_plan import ENGLISH_PLAN
from tunekit.errors import TunekitError
from tunekit.messages import Keyed
from tunekit.webui.board import Board
from tunekit.webui.chat import ChatSession, NoModel
from tunekit.webui.monitor import failed_status
from tunekit.webui.paths import PathPolicy
from tunekit.webui.problems_zh import ZH, say_error
from tunekit.webui.runner import Job, JobBusy, JobRunner

ALLOWED = option_words()


# ---------------------------------------------------------------- the templates


def test_every_new_template_is_chinese():
    """Each Chinese template (the planner's errors, the runner's refusal), its placeholders filled with a number, has
    no untranslated English: also the ones no cheap config reaches (sharding, a model that cannot be built)."""
    for key in [*ENGLISH_PLAN, "board_job_running"]:
        names = {name for _t, name, _s, _c in string.Formatter().parse(ZH[key]) if name}
        text = ZH[key].format(**dict.fromkeys(names, 1))
        assert HAN.search(text), key
        assert untranslated(text, ALLOWED) == [], (key, text)


# ---------------------------------------------------------------- a failing handler's line (guard.failure_message)


def test_a_failing_handlers_keyed_error_is_said_in_the_pages_language():
    from tunekit.train.engines.deepspeed_config import read_deepspeed
    from tunekit.webui.guard import failure_message

    with pytest.raises(TunekitError) as err:
        read_deepspeed("z4")
    assert failure_message(err.value, "zh") == (
        "⚠ 此操作未能完成：deepspeed：'z4' 既不是预设（预设名：z0、z1、z2、z2_offload、z3、z3_offload），也不是已存在"
        "的 JSON 文件。"
    )
    assert failure_message(err.value, "en") == (
        "⚠ This action could not be completed: deepspeed: 'z4' is neither a preset (a preset name: z0, z1, z2, "
        "z2_offload, z3, z3_offload) nor an existing JSON file."
    )
    busy = JobBusy(_keyed_busy())
    assert failure_message(busy, "zh") == "⚠ 此操作未能完成：面板上已有任务在运行：请先停止它，或等它结束"


def _keyed_busy():
    runner = JobRunner()
    runner.job = Job("train", [], runner.cwd, runner.cwd / "log", proc=SimpleNamespace(poll=lambda: None))
    with pytest.raises(JobBusy) as err:
        runner.start("train", [], "out")
    return err.value.args[0]


# ---------------------------------------------------------------- the runner's one job at a time


def test_the_runners_refusal_of_a_second_job_is_keyed():
    message = _keyed_busy()
    assert message == "a job is already running on this board: stop it or wait for it to finish"
    error = JobBusy(message)
    assert isinstance(error, RuntimeError) and isinstance(error, TunekitError)  # on_start and the guard catch it
    assert say_error(error, "zh") == "面板上已有任务在运行：请先停止它，或等它结束"
    assert say_error(error, "en") == str(message)


# ---------------------------------------------------------------- the planner's errors in the plan panel

SMALL = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 256,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model folders the planner refuses, each for one reason (config.json only: the planner builds on meta)."""
    root = tmp_path_factory.mktemp("models")
    folders = {
        "empty": None,
        "bad": "{",
        "notype": {"hidden_size": 4},
        "unknown": {"model_type": "nosuch"},
        "split": {**SMALL, "hidden_size": 10, "num_attention_heads": 3},
        "small": SMALL,
    }
    for name, content in folders.items():
        (root / name).mkdir()
        if content is not None:
            text = content if isinstance(content, str) else json.dumps(content)
            (root / name / "config.json").write_text(text)
    return root


def _planned(values: dict, lang: str, gpus: int = 1) -> str:
    from tunekit.webui.tabs.train import plan_text

    check = SimpleNamespace(ok=True, config=build_config({"stage": "sft", **values}))
    return plan_text(None, check, None, gpus, lang)[0]


def _plan_error(values: dict, gpus: int = 1) -> TunekitError:
    from tunekit.plan import make_plan

    with pytest.raises(TunekitError) as err:
        make_plan(build_config({"stage": "sft", **values}), gpus=gpus)
    return err.value


PLANNER_REFUSALS = [
    ("plan_no_config_json", {"model_name_or_path": "{models}/empty"}, 1),
    ("plan_model_unknown", {"model_name_or_path": "org/none"}, 1),
    ("plan_config_unreadable", {"model_name_or_path": "{models}/bad"}, 1),
    ("plan_no_model_type", {"model_name_or_path": "{models}/notype"}, 1),
    ("plan_model_type_unknown", {"model_name_or_path": "{models}/unknown"}, 1),
    ("plan_config_invalid", {"model_name_or_path": "{models}/split"}, 1),
    ("plan_lora_target_missing", {"model_name_or_path": "{models}/small", "lora_target": "nope"}, 1),
    ("plan_additional_target_missing", {"model_name_or_path": "{models}/small", "additional_target": "nope"}, 1),
    (
        "plan_freeze_layers_range",
        {"model_name_or_path": "{models}/small", "finetuning_type": "freeze", "freeze_trainable_layers": 5},
        1,
    ),
    (
        "plan_freeze_modules_missing",
        {"model_name_or_path": "{models}/small", "finetuning_type": "freeze", "freeze_trainable_modules": "nope"},
        1,
    ),
    (
        "plan_freeze_extra_missing",
        {"model_name_or_path": "{models}/small", "finetuning_type": "freeze", "freeze_extra_modules": "nope"},
        1,
    ),
    ("plan_positive", {"model_name_or_path": "{models}/small"}, -1),
]


@pytest.mark.parametrize(("key", "values", "gpus"), PLANNER_REFUSALS, ids=[c[0] for c in PLANNER_REFUSALS])
def test_each_planner_error_the_board_can_show_is_said_in_chinese(models, key, values, gpus):
    values = {k: v.format(models=models) if isinstance(v, str) else v for k, v in values.items()}
    error = _plan_error(values, gpus)
    message = error.args[0]
    assert isinstance(message, Keyed) and message.key == key
    zh = _planned(values, "zh", gpus)
    assert zh == f"⚠ {say_error(error, 'zh')}" and HAN.search(zh), zh
    assert untranslated(zh, ALLOWED | value_words(message)) == [], zh
    assert _planned(values, "en", gpus) == f"⚠ {error}"  # the English as before, what `tunekit plan` prints


def test_a_planner_error_in_both_languages(models):
    values = {"model_name_or_path": str(models / "small"), "lora_target": "nope"}
    assert _planned(values, "en") == (
        "⚠ lora_target names nope, which are not linear layers of small; available: down_proj, gate_proj, k_proj, "
        "o_proj, q_proj, up_proj, v_proj (or lora_target: all)."
    )
    assert _planned(values, "zh") == (
        "⚠ lora_target 指定的 nope 不是 small 的线性层；可用的有：down_proj、gate_proj、k_proj、o_proj、q_proj、"
        "up_proj、v_proj（或 lora_target: all）。"
    )
    unknown = {"model_name_or_path": "org/none"}
    english = _planned(unknown, "en")
    assert english.startswith(
        "⚠ model_name_or_path 'org/none' is not a folder on disk and not a built-in architecture, so its config.json "
        "is unknown: download the model's config.json and pass --model-config PATH, or use one of: "
    )
    assert _planned(unknown, "zh").startswith(
        "⚠ model_name_or_path 'org/none' 既不是磁盘上的目录，也不是内置架构，因此无法得知它的 config.json：请下载该"
        "模型的 config.json 并用 `--model-config PATH` 指定，或使用以下内置架构之一："
    )


# ---------------------------------------------------------------- the chat


class _Failing:
    """An engine whose reply fails the way a library fails (not a tunekit error)."""

    mm = None

    def stream_parts(self, messages, **kwargs):
        yield "content", "Hel"
        raise RuntimeError("CUDA out of memory")


def test_a_failed_reply_and_a_vanished_model_are_said_in_chinese():
    chat = ChatSession()
    chat.engine = _Failing()
    *_, last = chat.turn(None, "hi", lang="zh")
    assert last["shown"][-1] == {"role": "assistant", "content": "Hel⚠ 回复生成失败：RuntimeError: CUDA out of memory"}
    assert last["messages"] == []  # a failed reply does not join the conversation
    *_, last = chat.turn(None, "hi", lang="en")
    assert last["shown"][-1]["content"] == "Hel⚠ the reply failed: RuntimeError: CUDA out of memory"
    chat.engine = None  # unloaded by another page as this turn began
    with pytest.raises(NoModel, match="^请先加载模型（“加载模型”）。$"):
        list(chat.stream([{"role": "user", "content": "hi"}], None, lang="zh"))


def test_unload_says_so_in_the_pages_language(tmp_path):
    pytest.importorskip("gradio")
    from tunekit.webui.app import create_app

    demo = create_app(Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[])))
    tab = demo.tk_tabs["chat"]
    (fn,) = [f for f in demo.fns.values() if (tab.unload_btn._id, "click") in f.targets]
    assert fn.fn("zh") == "已卸载" and fn.fn("en") == "unloaded"


# ---------------------------------------------------------------- job status lines


def test_a_failed_jobs_reason_keeps_the_logs_english_after_a_chinese_lead_in():
    log = "$ tunekit train x=1\nloading\nerror: Option 'x' is wrong.\n"
    assert failed_status(2, log, "en") == " · exit 2\n\n```\nerror: Option 'x' is wrong.\n```"
    assert failed_status(2, log, "zh") == " · 退出码 2\n\n任务失败：\n\n```\nerror: Option 'x' is wrong.\n```"


def _job(board: Board, tmp_path, state: str) -> None:
    """The board's job in ``state``: a child process that has ended (or, for running / stopping, still runs)."""
    log = tmp_path / "job.log"
    log.write_text("$ tunekit train\nerror: Option 'x' is wrong.\n")
    code = 2 if state == "failed" else 0
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.exit({code})"])
    proc.wait()
    poll = (lambda: None) if state in ("running", "stopping") else proc.poll
    job = Job("train", [], tmp_path / "out", log, proc=SimpleNamespace(poll=poll, pid=proc.pid))
    job.stop_requests = int(state in ("stopping", "stopped"))
    board.runner.job = board.runner.last[job.kind] = job


def test_every_job_status_line_is_chinese(tmp_path):
    """Each state's status line (the Train tab's and the job areas of Evaluate & predict and Export: the same line);
    a failed job's adds its exit code and the log's reason."""
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[]))
    words = {"running": "运行中", "stopping": "正在停止", "stopped": "已停止", "finished": "已完成", "failed": "失败"}
    reason = "\n\n```\nerror: Option 'x' is wrong.\n```"
    for state, word in words.items():
        _job(board, tmp_path, state)
        zh, en = board.job_view("zh")["status"], board.job_view("en")["status"]
        tail = " · 退出码 2\n\n任务失败：" + reason if state == "failed" else ""
        assert zh == f"**{word}** · `tunekit train` · {tmp_path / 'out'}{tail}"
        assert en == f"**{state}** · `tunekit train` · {tmp_path / 'out'}" + (" · exit 2" + reason if tail else "")
        assert untranslated(zh, ALLOWED) == [], zh
