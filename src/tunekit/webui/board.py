"""What the board does, without the widgets: form values → config, command, YAML, jobs, plan.

:class:`Board` is the state one ``tunekit webui`` process keeps (the running job, the loaded chat
model). The Gradio layer (:mod:`tunekit.webui.app`) only maps widgets to these calls, so every
behaviour here is testable without a browser.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunekit.config import Config, build_config
from tunekit.config.files import load_yaml_text
from tunekit.config.problems import Problem, Said, config_error
from tunekit.config.secrets import (
    is_secret,
    job_secret_env,
    mask_secrets,
    referenced_var,
    references_kept,
    secret_env,
    write_options,
)
from tunekit.data.dataset_info import ROOTS_ENV, confined_to
from tunekit.errors import ConfigError, TunekitError
from tunekit.messages import Keyed

from . import backend as adapters
from . import defaults
from .chat import MAX_UPLOAD_BYTES, ChatSession
from .command import command_line, override_args, yaml_text
from .fields import FieldSpec, config_to_form, defaults_form, field_specs, form_to_values
from .i18n import t
from .media import gallery, media_markdown, preview_pieces
from .monitor import (
    failed_status,
    final_progress,
    loss_frame,
    lr_frame,
    progress_html,
    progress_of,
    read_results,
    read_trainer_log,
    tail,
    train_results,
)
from .paths import MAX_CONFIG_BYTES, PathPolicy, PathRefused, excerpt, safe_message
from .plan_panel import format_plan
from .problems_zh import say_error, say_job_error
from .runner import Job, JobRunner
from .sections import tab_of
from .validation import Validation, check_deepspeed, refused, validate


def _excerpted(message: Any, pieces: list[str]) -> Any:
    """``message`` (a keyed message, a tuple or a value) with each of ``pieces`` in its texts cut to an excerpt."""
    if isinstance(message, Keyed):
        return type(message)(message.key, **{k: _excerpted(v, pieces) for k, v in message.values.items()})
    if isinstance(message, tuple):
        return tuple(_excerpted(item, pieces) for item in message)
    if isinstance(message, str):
        for piece in pieces:
            message = message.replace(piece, excerpt(piece))
    return message


class Board:
    def __init__(
        self,
        cwd: str | Path | None = None,
        specs: list[FieldSpec] | None = None,
        policy: PathPolicy | None = None,
        served_dir: str | Path | None = None,
        max_upload_bytes: int = MAX_UPLOAD_BYTES,
    ):
        """``cwd``: the workspace (jobs run there, relative paths resolve there); ``policy``: which paths the
        board may use (default: the workspace and the caches); ``served_dir``: the only folder the board
        hands to Gradio to serve (copies of the loss plots, chat images, sample thumbnails), a fresh private
        temporary folder by default; ``max_upload_bytes``: the largest image the Chat tab accepts."""
        self.specs = specs if specs is not None else field_specs()
        self.by_name = {s.name: s for s in self.specs}
        self.runner = JobRunner(cwd)
        self.policy = policy or PathPolicy(self.runner.cwd)
        self.chat = ChatSession(upload_dir=lambda: self.served_dir, max_upload_bytes=max_upload_bytes)
        self.secrets: dict[str, str] = {}  # ENV_VAR -> value of secrets typed into the form (jobs get them)
        self._served_dir = Path(served_dir) if served_dir else None

    @property
    def served_dir(self) -> Path:
        if self._served_dir is None:
            import tempfile

            self._served_dir = Path(tempfile.mkdtemp(prefix="tunekit-webui-"))  # mode 0700
        self._served_dir.mkdir(parents=True, exist_ok=True)
        return self._served_dir

    def validate(self, values: Mapping[str, Any]) -> Validation:
        """The schema's check, then the path policy: a path outside the allowed roots is an error at its field.
        A secret's ``${ENV_VAR}`` stays a reference in the config (the board never expands one)."""
        with references_kept():
            check = validate(values)
        if not check.ok:
            return check
        problems = self.policy.problems(check.config.model_dump())
        if not problems:
            return check_deepspeed(check, self.runner.cwd)  # the file is allowed: read it as the job's preflight will
        return refused(Problem(message, (option,)) for option, message in problems)

    def tab_specs(self, tab: str) -> list[FieldSpec]:
        return [s for s in self.specs if tab_of(s) == tab]

    # ---------------------------------------------------------------- form ⇄ config
    def values(self, form: Mapping[str, Any]) -> dict[str, Any]:
        """The options a form sets (differing from the defaults), in schema order."""
        return form_to_values([s for s in self.specs if s.name in form], form)

    def defaults(self, tab: str = "train") -> dict[str, Any]:
        return defaults_form(self.tab_specs(tab))

    def form_from_config(self, cfg: Config, tab: str = "train") -> dict[str, Any]:
        return config_to_form(self.tab_specs(tab), cfg)

    def dataset_names(self, dataset_dir: str | None) -> list[str]:
        """The names in ``dataset_dir/dataset_info.json`` for the picker; none for a folder outside the roots."""
        try:
            folder = self.policy.check(dataset_dir or "data", "Option 'dataset_dir'")
        except PathRefused:
            return []
        return adapters.dataset_names(str(folder))

    def model_chat_template(self, model: str | None) -> bool:
        """Whether the local model folder ``model`` ships a chat template (false for a folder outside the roots)."""
        if not model:
            return False
        try:
            folder = self.policy.check(model, "Option 'model_name_or_path'")
        except PathRefused:
            return False
        return adapters.model_has_chat_template(str(folder))

    def load_yaml(self, path: str, tab: str = "train") -> dict[str, Any]:
        """``tab``'s form values of a YAML/JSON config inside the allowed roots. A ConfigError quotes what the file
        holds only as short escaped excerpts (the board must not be a way to read files)."""
        import yaml

        target = self.policy.config_file(path)
        if not target.is_file():
            raise config_error("board_config_missing", path=excerpt(path, 80))
        if target.stat().st_size > MAX_CONFIG_BYTES:
            raise config_error("board_config_too_large", path=str(target), limit=MAX_CONFIG_BYTES // 1000)
        text = target.read_text(encoding="utf-8", errors="replace")
        try:
            data = (
                json.loads(text) if target.suffix.lower() == ".json" else load_yaml_text(text, target)
            )  # alias budget
        except json.JSONDecodeError as exc:
            raise config_error("board_config_bad_json", path=str(target), line=exc.lineno, column=exc.colno) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = Said("part_board_line_column", line=mark.line + 1, column=mark.column + 1) if mark else None
            raise config_error("board_config_bad_yaml", path=str(target), where=where) from None
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise config_error("board_config_not_mapping", path=str(target), kind=type(data).__name__)
        unknown = [str(k) for k in data if k not in Config.model_fields]
        if unknown:
            more = Said("part_board_more") if len(unknown) > 3 else None
            names = tuple(f"'{excerpt(k)}'" for k in unknown[:3])
            raise config_error("board_config_unknown", path=str(target), count=len(unknown), names=names, more=more)
        try:
            with references_kept():  # the form goes to the browser: a ${VAR} stays a reference
                cfg = build_config(data, dict.fromkeys(data, Said("where_file", path=target.name)))
        except ConfigError as exc:
            pieces = {s for k, v in data.items() for s in (str(k), str(v), repr(v))}
            pieces = [piece for piece in sorted(pieces, key=len, reverse=True) if len(piece) > 24]
            message = str(exc)
            for piece in pieces:
                message = message.replace(piece, excerpt(piece))
            problems = [Problem(_excerpted(p.message, pieces), p.fields) for p in exc.problems]
            raise ConfigError(safe_message(message), problems) from None
        return self.form_from_config(cfg, tab)

    def save_yaml(self, form: Mapping[str, Any], path: str, overwrite: bool = False) -> Path:
        """Write the form's options (secrets as ${ENV_VAR}) to a .yaml/.yml/.json file inside the workspace;
        an existing file is replaced only with ``overwrite``."""
        target = self.policy.config_file(path, write=True)
        if target.exists() and not overwrite:
            raise PathRefused(Said("board_config_exists", path=str(target)))
        if target.exists() and not target.is_file():
            raise PathRefused(Said("board_config_folder", path=str(target)))
        return write_options(self.values(form), target, "json" if target.suffix.lower() == ".json" else "yaml")

    @staticmethod
    def default_output_dir(form: Mapping[str, Any], kind: str = "train") -> str:
        if kind == "train":
            return defaults.output_dir(form)  # saves/<model>/<stage>-<method>-<date>-<time>
        model = str(form.get("model_name_or_path") or "model").rstrip("/").split("/")[-1] or "model"
        method = form.get("finetuning_type") or "lora"
        return f"saves/{model}/{method}/{kind}_{time.strftime('%Y-%m-%d-%H-%M-%S')}"

    def with_output_dir(self, form: Mapping[str, Any], kind: str = "train") -> dict[str, Any]:
        form = dict(form)
        if "output_dir" in form and not str(form.get("output_dir") or "").strip():
            form["output_dir"] = self.default_output_dir(form, kind)
        return form

    def first_run_form(self, names) -> dict[str, Any]:
        """The Train form's first-run values (:mod:`tunekit.webui.defaults`) for the fields in ``names``."""
        return defaults.first_run_form(names)

    def run_names(self, form: Mapping[str, Any]) -> dict[str, Any]:
        """New ``output_dir`` / ``run_name`` when the model, stage or method changed (only names the board made)."""
        return defaults.renamed(form)

    def fill_run(self, form: Mapping[str, Any], lang: str = "en") -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        """The form a Preview or Start runs, the fields it changed, and the notes saying why (for :meth:`preview`).

        An empty output folder gets a name; a folder the board named that already holds a run gets a fresh one
        (unless the run resumes or overwrites it); logging every 5 steps (the first-run value) becomes every step
        when the run is shorter than 50 steps."""
        before, form = dict(form), self.with_output_dir(form)
        notes = []
        out = str(form.get("output_dir") or "")
        ours = defaults.is_auto("output_dir", out) and not defaults.keeps_its_folder(form)
        if ours and defaults.taken(self.runner.cwd / out):
            when = time.time()
            while defaults.taken(self.runner.cwd / defaults.output_dir(form, when)):
                when += 1  # a later second: its name is free
            form["output_dir"] = defaults.output_dir(form, when)
            if "run_name" in form and defaults.is_auto("run_name", form["run_name"]):
                form["run_name"] = defaults.run_name(form, when)
            notes.append(t("first_run_folder_taken", lang).format(old=out, new=form["output_dir"]))
        if "logging_steps" in form and defaults.board_logging_steps(form["logging_steps"]):
            steps = self.run_steps(form)
            if steps is not None and steps < defaults.SHORT_RUN_STEPS:
                form["logging_steps"] = "1" if float(str(form["logging_steps"])) != 1 else form["logging_steps"]
                notes.append(t("first_run_every_step", lang).format(steps=steps, limit=defaults.SHORT_RUN_STEPS))
        changed = {k: v for k, v in form.items() if k not in before or before[k] != v}
        return form, changed, notes

    def run_steps(self, form: Mapping[str, Any]) -> int | None:
        """The run's optimizer steps when they are known: ``max_steps``, else the memory plan's count (which
        measures the data); None when the form is not valid yet or the data cannot be read."""
        check = self.validate(self.values(form))
        if not check.ok:
            return None
        if check.config.max_steps > 0:
            return int(check.config.max_steps)
        if not check.config.model_name_or_path or not check.config.dataset:
            return None
        try:
            steps = adapters.make_plan(check.config, None, 1).get("total_steps")
        except Exception:  # the planner cannot read this model or data yet: keep the first-run value
            return None
        return int(steps) if isinstance(steps, (int, float)) and steps > 0 else None

    def plan_devices(self, lang: str = "en") -> tuple[list[tuple[str, str]], str]:
        """The memory plan's device picker: "this machine" first (its GPU, or memory only on a machine without a
        known GPU) and chosen, then the planner's GPU table."""
        here = adapters.detected_gpu()
        label = t("plan_this_machine", lang).format(name=here) if here else t("plan_this_machine_cpu", lang)
        choices = [(label, here)]
        if here != adapters.NO_GPU:
            choices.append((t("plan_no_gpu", lang), adapters.NO_GPU))
        return choices + [(n, n) for n in adapters.gpu_choices() if n != here], here

    # ---------------------------------------------------------------- preview / start
    def preview(self, form: Mapping[str, Any], verb: str = "train", notes=()) -> tuple[Validation, str, str]:
        """The check, the command line and the YAML; ``notes`` (what :meth:`fill_run` decided) head the YAML as
        comments, where they stay in view beside the command."""
        values = self.values(form)
        shown = mask_secrets(values)  # secrets appear as ${ENV_VAR}, as in the saved YAML and the job's argv
        comments = "".join(f"# {line}\n" for note in notes for line in note.splitlines())
        return self.validate(values), command_line(shown, verb), comments + yaml_text(shown)

    def sample_preview(
        self, form: Mapping[str, Any], n: int = 2
    ) -> tuple[Validation, list[tuple[str, str | None]], str]:
        """The first ``n`` samples of the form's first dataset as ``(text, "trained" | "media" | None)`` pieces,
        after the path policy (a file outside the allowed roots is never opened); a note when there is nothing to
        show. A run of media tokens is one ``"<image> × N tokens"`` piece labelled ``"media"``."""
        check, pieces, _samples, note = self.sample_preview_media(form, n)
        return check, pieces, note

    def sample_preview_media(
        self, form: Mapping[str, Any], n: int = 2, lang: str = "en"
    ) -> tuple[Validation, list, list, str]:
        """:meth:`sample_preview` and the samples themselves (``data.preview.SamplePreview``: their media); a run of
        media tokens in ``lang``."""
        check = self.validate(self.values(form))
        if not check.ok:
            return check, [], [], ""
        if not check.config.model_name_or_path or not check.config.dataset:
            return check, [], [], "⚠ " + t("preview_need", lang)
        cfg = check.config.model_copy(
            update={k: None for k, v in check.config.model_dump().items() if is_secret(k) and referenced_var(v)}
        )  # unexpanded: as unset
        try:
            with confined_to(self.policy.roots):  # a dataset_info.json changed since the check is held to it too
                samples = adapters.preview_samples(cfg, n)
        except ImportError as exc:
            return check, [], [], "⚠ " + t("preview_unavailable", lang).format(error=exc)
        except TunekitError as exc:
            return check, [], [], f"⚠ {safe_message(say_error(exc, lang))}"
        pieces: list[tuple[str, str | None]] = []
        for i, sample in enumerate(samples):
            if i:
                pieces.append(("\n\n────────\n\n", None))
            pieces += preview_pieces(sample, lang)
        return check, pieces, samples, ""

    def sample_media(self, samples: list, lang: str = "en") -> tuple[list[tuple[str, str]], str]:
        """The previewed samples' image thumbnails ``(file, caption)`` and their media list (Markdown)."""
        return gallery(samples, self.policy, self.served_dir), media_markdown(samples, self.policy, lang)

    def start_job(
        self,
        verb: str,
        values: Mapping[str, Any],
        output_dir: str | Path,
        *,
        form: Mapping | None = None,
        kind: str = "train",
    ) -> Job:
        """Run ``tunekit <verb>`` with ``values``: secrets go to the job's environment, its argv and log
        carry only their ${ENV_VAR} references."""
        self.secrets.update(secret_env(values))
        masked_form = mask_secrets(dict(form)) if form else None
        return self.runner.start(
            verb, override_args(mask_secrets(values)), output_dir, form=masked_form, kind=kind, env=self.job_env()
        )

    def job_env(self) -> dict[str, str]:
        """What a job's environment gets: the secrets typed into the board (and only those may be expanded
        from a ${VAR} reference: ``$TUNEKIT_SECRET_VARS``), and the roots its data reading is confined to."""
        return {**job_secret_env(self.secrets), ROOTS_ENV: os.pathsep.join(str(r) for r in self.policy.roots)}

    def start_train(self, form: Mapping[str, Any], kind: str = "train") -> tuple[Validation, Job | None]:
        """Validate, then run ``tunekit train`` with the previewed arguments (one job at a time)."""
        values = self.values(form)
        check = self.validate(values)
        if not check.ok:
            return check, None
        job = self.start_job("train", values, check.config.output_dir or ".", form=dict(form), kind=kind)
        return check, job

    def start_export(self, values: Mapping[str, Any]) -> tuple[Validation, Job | None]:
        check = self.validate(values)
        if not check.ok:
            return check, None
        out = check.config.export_dir or "."
        return check, self.start_job("export", values, out, kind="export")

    def served_copy(self, path: Path) -> str:
        """A copy of a plot in :attr:`served_dir` (the one folder Gradio may serve), refreshed when it changes."""
        st = path.stat()
        target = self.served_dir / f"{abs(hash(str(path.resolve()))):x}-{st.st_mtime_ns}-{path.name}"
        if not target.exists():
            for old in self.served_dir.glob(f"{abs(hash(str(path.resolve()))):x}-*"):
                old.unlink(missing_ok=True)
            shutil.copyfile(path, target)
        return str(target)

    # ---------------------------------------------------------------- monitoring
    def job_view(self, lang: str = "en", kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Everything the status area shows, from the job (the newest of ``kinds``, else the board's) and its files."""
        job = self.runner.poll() if kinds is None else self.runner.newest(kinds)
        if job is None:
            return {
                "state": "idle",
                "status": t("idle", lang),
                "html": progress_html(None),
                "chart": loss_frame([]),
                "lr_chart": lr_frame([]),
                "total": None,
                "log": "",
                "png": None,
                "results": {},
                "kind": None,
                "output_dir": None,
                "signature": ("idle",),
                "lang": lang,
            }
        records = read_trainer_log(job.output_dir) if job.kind != "export" else []
        prog = progress_of(records)
        if job.kind == "train" and not job.running:  # the last step and run time the log may not have
            prog = final_progress(prog, train_results(job.output_dir, job.started), job.state)
        log = tail(job.log_path, 40)
        status = f"**{t(f'state_{job.state}', lang)}** · `tunekit {job.verb}` · {job.output_dir}"
        if job.state == "failed":
            status += failed_status(job.returncode, tail(job.log_path, 200), lang, say_job_error(job.error_path, lang))
        png = job.output_dir / "training_loss.png"
        size = job.log_path.stat().st_size if job.log_path.exists() else 0
        return {
            "state": job.state,
            "status": status,
            "html": progress_html(prog, job.state, lang),
            "chart": loss_frame(records),  # numeric columns in step order (the live chart's data)
            "lr_chart": lr_frame(records),
            "total": prog.total or None,
            "log": log,
            "png": self.served_copy(png) if png.is_file() else None,
            "results": read_results(job.output_dir),
            "kind": job.kind,
            "output_dir": str(job.output_dir),
            "signature": (id(job), job.state, len(records), size, png.is_file()),
            "lang": lang,  # the language of the words in it (the charts' legend follows it)
        }


__all__ = ["Board", "adapters", "format_plan", "progress_html"]
