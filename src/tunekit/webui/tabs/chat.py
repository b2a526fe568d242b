"""The Chat tab: load a model (its own model / adapter / checkpoint boxes, or the Train tab's in one click) once,
then stream replies with the tab's generation options; an uploaded image goes with the next message (a
vision-language model; :meth:`tunekit.webui.chat.ChatSession.turn`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from tunekit.errors import TunekitError
from tunekit.infer.options import GEN_OPTIONS

from ..chat import new_conversation
from ..form import FormView
from ..i18n import t
from ..problems_zh import say_error
from . import Page, follow_train_load
from . import source as model_source

# The per-call generation options the Chat tab's form sets. Not ``seed``: the option of that name is the
# training seed (generation reads generation_seed from the config); ``stop`` is not an option of the form.
CHAT_GEN_KEYS = tuple(k for k in GEN_OPTIONS if k not in ("seed", "stop"))


@dataclass
class ChatTab:
    source: model_source.ModelSource
    load_btn: Any
    unload_btn: Any
    info: Any
    form: FormView  # the generation options
    system: Any
    chatbot: Any
    message: Any
    image: Any  # an image file for the next message
    conversation: Any  # gr.State: ChatSession.turn's conversation (kept on the server)
    send_btn: Any
    clear_btn: Any


def build(page: Page) -> ChatTab:
    lang, L = page.lang, page.label
    with gr.Tab(t("tab_chat", lang), id="chat", elem_id="tk-tab-chat") as tab:
        L(tab, "tab_chat")
        src = model_source.build(page, "chat")
        with gr.Row():
            load_btn = L(
                gr.Button(t("chat_load", lang), variant="primary", elem_id="tk-chat-load"), "chat_load", "value"
            )
            unload_btn = L(gr.Button(t("chat_unload", lang), elem_id="tk-chat-unload"), "chat_unload", "value")
        info = gr.Markdown(elem_id="tk-chat-info")
        form = FormView(page.board.tab_specs("chat"))
        with gr.Accordion(t("sec_infer", lang), open=False, elem_id="tk-section-infer") as acc:
            L(acc, "sec_infer")
            form.render_flat(lang, key="chat")  # read through form.values (FormView.add_values)
        system = L(gr.Textbox(label=t("chat_system", lang), elem_id="tk-chat-system"), "chat_system")
        chatbot = L(gr.Chatbot(label=t("chat_box", lang), elem_id="tk-chatbot", height=360), "chat_box")
        with gr.Row():
            message = L(gr.Textbox(label=t("chat_input", lang), scale=4, elem_id="tk-chat-input"), "chat_input")
            send_btn = L(
                gr.Button(t("chat_send", lang), variant="primary", scale=1, elem_id="tk-chat-send"),
                "chat_send",
                "value",
            )
            clear_btn = L(gr.Button(t("chat_clear", lang), scale=1, elem_id="tk-chat-clear"), "chat_clear", "value")
        image = L(
            gr.File(
                label=t("chat_image", lang), file_types=["image"], type="filepath", height=120, elem_id="tk-chat-image"
            ),
            "chat_image",
        )
        conversation = gr.State(new_conversation())
    return ChatTab(
        src,
        load_btn,
        unload_btn,
        info,
        form,
        system,
        chatbot,
        message,
        image,
        conversation,
        send_btn,
        clear_btn,
    )


def wire(page: Page, tab: ChatTab, train=None) -> None:
    """``train``: the Train tab (its form for "Use the Train tab's"; its Load also sets the generation options)."""
    board = page.board
    model_source.wire(page, tab.source, train.form if train is not None else None)
    if train is not None:
        follow_train_load(page, train, tab.form)

    def on_load(data):
        vals = {**tab.source.values(data), **board.values(tab.form.read_map(data))}
        check = board.validate(vals)
        if not check.ok:
            return f"⚠ {check.text(data[page.lang_radio])}"
        if not check.config.model_name_or_path:
            return f"⚠ {t('src_need_model', data[page.lang_radio])}"
        try:
            desc = board.chat.load(check.config)
        except TunekitError as exc:
            return f"⚠ {say_error(exc, data[page.lang_radio])}"
        except Exception as exc:  # noqa: BLE001 - show any load failure in the board
            error = f"{type(exc).__name__}: {exc}"
            return "⚠ " + t("model_load_failed", data[page.lang_radio]).format(error=error)
        return t("model_loaded", data[page.lang_radio]).format(model=desc)

    page.on(
        tab.load_btn.click,
        on_load,
        inputs={*tab.source.inputs, tab.form.values, page.lang_radio},
        outputs=tab.info,
        api_visibility="private",
    )
    page.on(  # a language switch: the loaded model's line in the new words (an action's answer stays as it was)
        page.lang_radio.change,
        lambda lang: t("model_loaded", lang).format(model=board.chat.description) if board.chat.loaded else gr.skip(),
        inputs=page.lang_radio,
        outputs=tab.info,
        api_visibility="private",
    )
    page.on(
        tab.unload_btn.click,
        lambda lang: (board.chat.unload(), t("chat_unloaded", lang))[1],
        inputs=page.lang_radio,
        outputs=tab.info,
        api_visibility="private",
    )

    def on_send(data):
        gen = {k: v for k, v in board.values(tab.form.read_map(data)).items() if k in CHAT_GEN_KEYS}
        text, image = data[tab.message], data[tab.image]
        for convo in board.chat.turn(
            data[tab.conversation], text, image, data[tab.system] or None, data[page.lang_radio], **gen
        ):
            cleared = {tab.message: "", tab.image: None} if text else {}
            yield {tab.chatbot: convo["shown"], tab.conversation: convo, **cleared}

    inputs = {tab.message, tab.image, tab.conversation, tab.system, page.lang_radio, tab.form.values}
    outputs = [tab.chatbot, tab.conversation, tab.message, tab.image]
    for event in (tab.send_btn.click, tab.message.submit):
        page.on(event, on_send, inputs=inputs, outputs=outputs, api_visibility="private")
    page.on(
        tab.clear_btn.click,
        lambda: ([], new_conversation()),
        outputs=[tab.chatbot, tab.conversation],
        api_visibility="private",
    )
