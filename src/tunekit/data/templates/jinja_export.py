"""An HF ``chat_template`` (Jinja) that renders exactly what a tunekit template renders.

Exported models carry it, so plain ``tokenizer.apply_chat_template`` (vLLM, TGI, transformers) builds the
same prompts the model was trained on. Families whose official template we reproduce exactly (Qwen) get
that official text; the others get a template generated from the spec with the tokenizer's special-token
strings written in. Generated templates render system/user/assistant/tool messages; assistant
``tool_calls`` are not rendered (function calling at inference: use the Qwen templates).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Template


@cache
def official_jinja(stem: str) -> str:
    return resources.files("tunekit.data.templates").joinpath(f"official_{stem}.jinja").read_text(encoding="utf-8")


def lit(text: str) -> str:
    """A Jinja string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def _parts(tpl: Template, fmt: str) -> tuple[str, str]:
    pre, _, post = fmt.partition("{content}")
    return tpl._sub(pre), tpl._sub(post)


def chat_template_for(tpl: Template, enable_thinking: bool = True) -> str | None:
    """The Jinja text; ``enable_thinking=False`` makes thinking off the default (reasoning templates).

    ``None`` for a reasoning template without an official Jinja text (qwen3_vl): the generated template does not
    render ``<think>`` blocks as training does, so the model folder keeps its own (official) chat template."""
    if tpl.spec.reasoning and not tpl.spec.official_jinja:
        return None
    head = ""
    if tpl.spec.reasoning and not enable_thinking:
        head += "{%- if enable_thinking is not defined -%}{%- set enable_thinking = false -%}{%- endif -%}"
    if tpl.spec.official_jinja:
        if tpl.default_system and tpl.default_system != tpl.spec.default_system:  # a configured default_system
            head += (
                "{%- if not (messages and messages[0]['role'] == 'system') -%}"
                f"{{%- set messages = [{{'role': 'system', 'content': {lit(tpl.default_system)}}}] + messages -%}}"
                "{%- endif -%}"
            )
        return head + official_jinja(tpl.spec.official_jinja)
    return head + _generated(tpl)


def _generated(tpl: Template) -> str:
    spec = tpl.spec

    def content(role: str, var: str = "m['content']") -> str:
        return f"({var} | trim)" if role in spec.trim else var

    header = tpl._sub(spec.header)
    u_pre, u_post = _parts(tpl, spec.user)
    o_pre, o_post = _parts(tpl, spec.observation or spec.user)
    if header:
        assert u_post.endswith(header) and o_post.endswith(header), spec.name
        u_post, o_post = u_post[: -len(header)], o_post[: -len(header)]
    s_pre, s_post = _parts(tpl, spec.system)
    a_pre, a_post = _parts(tpl, spec.assistant)
    default = lit(tpl.default_system) if tpl.default_system else "''"

    j = []
    j.append(
        "{%- if messages and messages[0]['role'] == 'system' -%}"
        "{%- set sys = messages[0]['content'] -%}{%- set msgs = messages[1:] -%}"
        f"{{%- else -%}}{{%- set sys = {default} -%}}{{%- set msgs = messages -%}}{{%- endif -%}}"
        f"{{%- if not sys -%}}{{%- set sys = {default} -%}}{{%- endif -%}}"
        "{%- set ns = namespace(last_user=-1) -%}"
        "{%- for m in msgs -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
        "{%- endfor -%}"
    )
    if spec.prefix:
        j.append(f"{{{{- {lit(tpl._sub(spec.prefix))} -}}}}")
    if spec.system_in == "block":
        j.append(
            f"{{%- if sys -%}}{{{{- {lit(s_pre)} + {content('system', 'sys')} + {lit(s_post)} -}}}}{{%- endif -%}}"
        )
    merge_when = {"first_user": "loop.first", "last_user": "loop.index0 == ns.last_user"}.get(spec.system_in)
    j.append("{%- for m in msgs -%}")
    j.append("{%- if m['role'] in ['user', 'tool', 'observation'] -%}")
    if spec.sep:
        j.append(f"{{%- if not loop.first -%}}{{{{- {lit(tpl._sub(spec.sep))} -}}}}{{%- endif -%}}")
    j.append("{%- if m['role'] == 'user' -%}")
    if merge_when and spec.trim_after_merge:
        j.append(
            f"{{%- if {merge_when} and sys -%}}"
            f"{{%- set c = ({lit(s_pre)} + sys + {lit(s_post)} + m['content']) | trim -%}}"
            f"{{%- else -%}}{{%- set c = {content('user')} -%}}{{%- endif -%}}"
        )
    elif merge_when:
        j.append(
            f"{{%- set c = {content('user')} -%}}"
            f"{{%- if {merge_when} and sys -%}}{{%- set c = {lit(s_pre)} + sys + {lit(s_post)} + c -%}}{{%- endif -%}}"
        )
    else:
        j.append(f"{{%- set c = {content('user')} -%}}")
    j.append(f"{{{{- {lit(u_pre)} + c + {lit(u_post)} -}}}}")
    j.append(f"{{%- else -%}}{{{{- {lit(o_pre)} + {content('observation')} + {lit(o_post)} -}}}}{{%- endif -%}}")
    if header:
        j.append(f"{{%- if not loop.last or add_generation_prompt -%}}{{{{- {lit(header)} -}}}}{{%- endif -%}}")
    j.append("{%- elif m['role'] == 'assistant' -%}")
    j.append(f"{{{{- {lit(a_pre)} + {content('assistant')} + {lit(a_post)} -}}}}")
    if spec.final_stop:
        j.append(
            f"{{%- if loop.last and not add_generation_prompt -%}}"
            f"{{{{- {lit(tpl._sub(spec.final_stop))} -}}}}{{%- endif -%}}"
        )
    j.append("{%- endif -%}")
    j.append("{%- endfor -%}")
    return "".join(j)
