"""`tunekit templates`: the list (without importing torch) and a rendered sample with trained parts marked."""

from __future__ import annotations

import subprocess
import sys

from tunekit.cli.main import main
from tunekit.data.templates import list_templates


def test_list_names_every_template(capsys):
    assert main(["templates"]) == 0
    out = capsys.readouterr().out
    for name in list_templates():
        assert f"\n  {name} " in out
    assert "Qwen3 hybrid-reasoning models" in out


def test_list_does_not_import_torch():
    code = (
        "import sys; from tunekit.cli.main import main; main(['templates']); print('torch' in sys.modules, "
        "'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False False")


def test_sample_marks_trained_parts(capsys):
    assert main(["templates", "qwen"]) == 0
    out = capsys.readouterr().out
    assert "<|im_start|>assistant\n[[Paris.<|im_end|>]]\n<|im_start|>user\nAnd of Italy?" in out
    assert "stop words: <|im_end|>" in out
    assert out.rstrip().endswith("And of Italy?<|im_end|>\n<|im_start|>assistant")


def test_sample_reasoning_off_and_tools(capsys):
    assert main(["templates", "qwen3", "--no-thinking"]) == 0
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n[[Paris.<|im_end|>]]" in capsys.readouterr().out
    assert main(["templates", "llama3", "--tools"]) == 0
    assert '[[{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>]]' in capsys.readouterr().out


def test_unknown_template_is_a_clean_error(capsys):
    assert main(["templates", "lama3"]) == 2
    assert "error: unknown template 'lama3'. Did you mean: llama3" in capsys.readouterr().err
