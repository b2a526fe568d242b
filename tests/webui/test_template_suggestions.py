"""The board's template suggestion for the mixture-of-experts / reasoning families (webui/pickers.template_hint).

A model folder's family suggests its template; a folder with its own chat template gets ``jinja``, except where the
family's template is a reasoning template: its official chat template drops earlier thoughts (gpt-oss's also ends
history replies differently), so ``jinja`` cannot find the reply spans of a multi-turn conversation
(data/templates/jinja_mode.py) and the named template is suggested instead.
"""

from __future__ import annotations

import pytest

from tunekit.data.templates import get_template
from tunekit.errors import ConfigError
from tunekit.tiny.text import build_tiny_model
from tunekit.webui import backend
from tunekit.webui.paths import PathPolicy
from tunekit.webui.pickers import template_hint

CONV = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Bye!"},
]


@pytest.mark.parametrize(
    ("like", "family_template", "suggested"),
    [
        ("gpt-oss-20b", "gpt_oss", "gpt_oss"),  # ships gpt-oss's official template, which rewrites history
        ("deepseek-v2-chat", "deepseek", "jinja"),  # its own template renders history as it trains: jinja works
    ],
)
def test_a_tiny_moe_folder_suggests_its_family_template(tmp_path, like, family_template, suggested):
    from transformers import AutoTokenizer

    folder = build_tiny_model(tmp_path / "ws" / like, like=like, num_layers=1)
    assert backend.model_family(str(folder))[0] == family_template
    hint = template_hint(PathPolicy(tmp_path / "ws", caches=[]), str(folder))
    assert hint.template == suggested
    jinja = get_template("jinja", AutoTokenizer.from_pretrained(folder))
    if suggested == "jinja":
        assert len(jinja.encode_turns(CONV)) == 2
    else:  # what 'jinja' would do with the folder's own template
        with pytest.raises(ConfigError, match="is not prefix-preserving"):
            jinja.encode_turns(CONV)
