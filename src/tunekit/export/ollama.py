"""The Ollama ``Modelfile`` written beside a GGUF export: the chat template the model was trained with, in Ollama's Go
template language, its stop tokens and its default system message.

Ollama renders ``TEMPLATE`` with ``.System`` (the request's system message, else the Modelfile's ``SYSTEM``) and
``.Messages`` (each with ``.Role`` and ``.Content``; system messages are in the list too, and skipped here as the
template renders ``.System`` itself). The Go template below is built from the same template spec tunekit trains
with (``data/templates``): the prefix, the system block, each user message with the assistant header that follows it,
each reply with its end-of-turn marker and the separator before the next user message, so a conversation of
system/user/assistant turns renders to the text tunekit's template renders. What Go's template language cannot
express is said in a comment at the top of the file: tools (rendered by tunekit's tool formats), the trimming of
contents some families do (Llama 3: Ollama passes contents as they come).

Reasoning templates: the generation prompt opens the thought where the official template does (DeepSeek-R1's
``<think>\n``, ``think_prompt``) or holds the empty thought when the run trained with ``enable_thinking: false``;
earlier replies render without their thoughts (Ollama passes a reply's thought as ``.Thinking``, which the official
templates drop from history). gpt-oss (harmony, :func:`harmony_go_template`): the system block with Ollama's
``currentDate`` where the official template writes today's date, the system message as the developer instructions,
earlier replies in the final channel ending with ``<|end|>``; the stops ``<|return|>`` and ``<|call|>``.
"""

from __future__ import annotations

from pathlib import Path

from ..data.templates.base import EMPTY_THOUGHT
from ..data.templates.harmony import EMPTY_ANALYSIS, FINAL_END, SYSTEM_BLOCK, HarmonyTemplate
from ..model.stops import generation_stops

MODELFILE = "Modelfile"
_LAST = "{{ $last := eq (len (slice $.Messages $i)) 1 }}"


def _fill(template, fmt: str, content: str) -> str:
    """``fmt`` with the template's BOS/EOS strings and ``content`` (a Go template action) in place of ``{content}``."""
    return fmt.replace("{bos}", template.bos).replace("{eos}", template.eos).replace("{content}", content)


def go_template(template, enable_thinking: bool = True) -> str:
    """Ollama's ``TEMPLATE`` for a tunekit :class:`~tunekit.data.templates.base.Template` (bound to a tokenizer)."""
    if isinstance(template, HarmonyTemplate):
        return harmony_go_template(template, enable_thinking)
    spec = template.spec
    system = _fill(template, spec.system, "{{ $.System }}")
    content = "{{ .Content }}"
    merge = {"first_user": "{{ if $first }}", "last_user": "{{ if $last }}"}.get(spec.system_in)
    if merge:  # the system message glued in front of the first / last user message (Gemma, Mistral, Llama 2)
        content = "{{ if $.System }}" + merge + system + "{{ end }}{{ end }}" + content
    user = _fill(template, spec.user, content)
    if spec.reasoning and not enable_thinking:  # trained with enable_thinking: false: the empty thought is prompt
        user += "{{ if $last }}" + EMPTY_THOUGHT + "{{ end }}"
    elif spec.think_prompt:  # the generation prompt opens the thought (DeepSeek-R1's "<think>\n")
        user += "{{ if $last }}" + spec.think_prompt + "{{ end }}"
    if spec.system_in == "first_user":
        user += "{{ $first = false }}"
    sep = _fill(template, spec.sep, "")
    reply = _fill(template, spec.assistant, "{{ .Content }}")
    if sep:  # the separator belongs to the next user message: none after the last reply
        reply += "{{ if not $last }}" + sep + "{{ end }}"
    head = _fill(template, spec.prefix, "")
    if spec.system_in == "block":
        head += "{{ if .System }}" + system + "{{ end }}"
    elif spec.system_in == "first_user":
        head += "{{ $first := true }}"
    loop = "{{ range $i, $_ := .Messages }}"
    if "$last" in user + reply:
        loop += _LAST
    roles = '{{ if eq .Role "user" }}' + user + '{{ else if eq .Role "assistant" }}' + reply + "{{ end }}"
    return head + loop + roles + "{{ end }}"


def harmony_go_template(template, enable_thinking: bool = True) -> str:
    """gpt-oss's ``TEMPLATE`` (module docstring): what :class:`~tunekit.data.templates.harmony.HarmonyTemplate` renders
    for system / user / assistant turns, the date from Ollama's ``currentDate``."""
    spec = template.spec
    head = SYSTEM_BLOCK.format(date="{{ currentDate }}")
    head += "{{ if .System }}" + _fill(template, spec.system, "{{ .System }}") + "{{ end }}"
    user = _fill(template, spec.user, "{{ .Content }}")
    if not enable_thinking:  # the empty analysis message is prompt: the model answers in the final channel at once
        user += "{{ if $last }}" + EMPTY_ANALYSIS + "{{ end }}"
    final = _fill(template, spec.assistant, "{{ .Content }}").removesuffix(spec.stop_words[0])
    reply = final + "{{ if $last }}" + spec.stop_words[0] + "{{ end }}{{ if not $last }}" + FINAL_END + "{{ end }}"
    roles = '{{ if eq .Role "user" }}' + user + '{{ else if eq .Role "assistant" }}' + reply + "{{ end }}"
    return head + "{{ range $i, $_ := .Messages }}" + _LAST + roles + "{{ end }}"


def _notes(template) -> list[str]:
    spec = getattr(template, "spec", None)
    if spec is None:  # template: jinja (the tokenizer's own chat template)
        return [
            "no TEMPLATE: the model's own Jinja chat template (template: jinja) is not translated; Ollama derives "
            "one from the GGUF's tokenizer.chat_template when it recognises it, else write TEMPLATE yourself"
        ]
    notes = []
    if spec.trim:
        notes.append(
            f"tunekit's '{template.name}' template strips the {', '.join(sorted(spec.trim))} contents; Ollama's "
            "template language cannot, so send them without leading/trailing whitespace"
        )
    if template.tool_format:
        notes.append("tools and tool results are not in this TEMPLATE (tunekit renders them with its tool format)")
    if isinstance(template, HarmonyTemplate):
        notes.append(
            "harmony: the date is Ollama's currentDate; tools, reasoning effort other than medium and earlier "
            "thoughts (analysis messages) are not rendered, as the official template drops them from history"
        )
    return notes


def modelfile_text(gguf_name: str, template, tokenizer, system: str | None, enable_thinking: bool = True) -> str:
    """The Modelfile: ``FROM ./<gguf_name>``, ``TEMPLATE``, ``SYSTEM`` (when the template or the config has a default
    system message) and one ``PARAMETER stop`` per stop token (as tunekit's chat stops: the template's end-of-turn
    markers, the tokenizer's EOS) and per stop text that is not one token."""
    ids, texts = generation_stops(tokenizer, template)
    stops = [tokenizer.convert_ids_to_tokens(i) for i in ids] + texts
    lines = [f"# Ollama Modelfile written by tunekit for the '{template.name}' template"]
    lines += [f"# note: {note}" for note in _notes(template)]
    lines += ["", f"FROM ./{gguf_name}", ""]
    if getattr(template, "spec", None) is not None:
        lines += [f'TEMPLATE """{go_template(template, enable_thinking)}"""', ""]
    default = system or getattr(template, "default_system", None)
    if default:
        lines += [f'SYSTEM """{default}"""', ""]
    lines += [f'PARAMETER stop "{stop}"' for stop in dict.fromkeys(stops)]
    return "\n".join(lines) + "\n"


def write_modelfile(out: Path, gguf_name: str, template, tokenizer, system: str | None, enable_thinking: bool) -> Path:
    path = out / MODELFILE
    path.write_text(modelfile_text(gguf_name, template, tokenizer, system, enable_thinking), encoding="utf-8")
    return path
