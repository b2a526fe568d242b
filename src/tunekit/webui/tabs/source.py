"""The model a tab loads, in its own boxes: model, adapter, template, and a picker of a run's checkpoints, with
"Use the Train tab's" as a one-click choice. The Evaluate & predict, Chat and Export tabs each have one
(:mod:`tunekit.webui.checkpoints` does the work)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..checkpoints import pick_checkpoint, run_checkpoints, source_values, trained_source
from ..i18n import t
from . import Page, template_dropdown


@dataclass
class ModelSource:
    model: Any
    adapter: Any
    template: Any
    run_dir: Any  # the run folder whose checkpoints the picker lists
    checkpoint: Any
    refresh: Any
    use_trained: Any

    @property
    def inputs(self) -> list[Any]:
        return [self.model, self.adapter, self.template]

    def values(self, data: Mapping[Any, Any]) -> dict[str, Any]:
        """The options the boxes set (``data``: a handler's ``{component: value}`` inputs)."""
        return source_values(data.get(self.model), data.get(self.adapter), data.get(self.template))


def build(page: Page, prefix: str, model_key: str = "chat_model", adapter_key: str = "chat_adapter") -> ModelSource:
    """The boxes, with element ids ``tk-<prefix>-model``, ``-adapter``, ``-template``, ``-run-dir``,
    ``-checkpoint``, ``-use-trained``."""
    lang, L = page.lang, page.label
    with gr.Row():
        model = L(gr.Textbox(label=t(model_key, lang), elem_id=f"tk-{prefix}-model", scale=2), model_key)
        adapter = L(gr.Textbox(label=t(adapter_key, lang), elem_id=f"tk-{prefix}-adapter", scale=2), adapter_key)
        template = template_dropdown(page, f"tk-{prefix}-template")
    with gr.Row():
        run_dir = L(gr.Textbox(label=t("src_run_dir", lang), elem_id=f"tk-{prefix}-run-dir", scale=2), "src_run_dir")
        checkpoint = L(
            gr.Dropdown(
                choices=[], value=None, allow_custom_value=True, label=t("src_checkpoint", lang),
                elem_id=f"tk-{prefix}-checkpoint", scale=2,
            ),
            "src_checkpoint",
        )  # fmt: skip
        with gr.Column(scale=1, min_width=160):
            refresh = L(
                gr.Button(t("src_refresh", lang), size="sm", elem_id=f"tk-{prefix}-checkpoints-refresh"),
                "src_refresh",
                "value",
            )
            use_trained = L(
                gr.Button(t("src_use_train", lang), size="sm", elem_id=f"tk-{prefix}-use-trained"),
                "src_use_train",
                "value",
            )
    return ModelSource(model, adapter, template, run_dir, checkpoint, refresh, use_trained)


def checkpoint_choices(page: Page, run_dir: str | None) -> list[tuple[str, str]]:
    """The picker's choices: each ``checkpoint-N`` of the run folder, labelled by its name."""
    return [(path.rsplit("/", 1)[-1], path) for path in run_checkpoints(page.board.policy, run_dir)]


def wire(page: Page, src: ModelSource, train_form, also=None, outputs=()) -> None:
    """The checkpoint picker (listed from the run folder; a pick fills the model or adapter box) and "Use the Train
    tab's" (``train_form``: the Train tab's :class:`~tunekit.webui.form.FormView`). ``also(train values)`` answers
    the tab's own ``outputs`` from the Train tab's values as well."""
    policy = page.board.policy

    def on_refresh(data):
        return {src.checkpoint: gr.update(choices=checkpoint_choices(page, data[src.run_dir]), value=None)}

    def on_pick(data):
        picked = pick_checkpoint(policy, data[src.checkpoint], data[src.model])
        if picked is None:
            return gr.skip()  # (an empty dict would be read as one value for two outputs)
        return {src.model: picked[0], src.adapter: picked[1]}

    def on_use_train(data):
        train = train_form.read_map(data)
        return {**use_train_update(page, src, train), **(also(train) if also else {})}

    for event in (src.refresh.click, src.run_dir.submit):
        page.on(event, on_refresh, inputs={src.run_dir}, outputs=[src.checkpoint], api_visibility="private")
    page.on(
        src.checkpoint.input,
        on_pick,
        inputs={src.checkpoint, src.model},
        outputs=[src.model, src.adapter],
        api_visibility="private",
    )
    if train_form is None:
        return
    page.on(
        src.use_trained.click,
        on_use_train,
        inputs={train_form.values},
        outputs=[src.model, src.adapter, src.template, src.run_dir, src.checkpoint, *outputs],
        api_visibility="private",
    )


def use_train_update(page: Page, src: ModelSource, train: Mapping[str, Any]) -> dict[Any, Any]:
    """The boxes set from the Train tab's values (its form as ``{option: value}``)."""
    got = trained_source(page.board.policy, train)
    return {
        src.model: got["model"],
        src.adapter: got["adapter"],
        src.template: got["template"],
        src.run_dir: got["run_dir"],
        src.checkpoint: gr.update(choices=checkpoint_choices(page, got["run_dir"]), value=None),
    }
