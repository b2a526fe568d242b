"""The planner's notes as values: a key and its values, and one English template per key (:data:`ENGLISH`).

A :class:`Note` *is* its English sentence (a ``str``: ``tunekit plan`` prints it, ``--json`` lists it in ``notes``,
``tunekit train`` logs it) and also keeps what it was made of, so that another language says it again from the key
and the values with its own template, never by reading the English back (the web board: ``webui/plan_panel.py`` with
the ``plan_<key>`` entries of ``webui/i18n.py``; ``tests/webui/test_plan_panel_notes.py`` holds every key here to a
Chinese template with the same placeholders).

The machinery (rendering, values, joins) is :mod:`tunekit.messages`, shared with the config's problems.
A value is a number (shown with the template's format spec), a name or a path (a ``str``, shown as it is), ``None``
(an optional tail left out: shown as nothing), another note (a part that varies in words: a device, a reason, where a
row length comes from) or a tuple of those, joined the way :data:`JOINS` says for that placeholder.
:meth:`Note.to_json` is the same note as plain JSON (``structured_notes`` in ``tunekit plan --json``), and
:func:`render` says such a note with any language's templates.
"""

from __future__ import annotations

from tunekit.config.problem_texts_plan import RUNG_JOINS, RUNGS
from tunekit.messages import Keyed, placeholders, render

__all__ = ["ENGLISH", "JOINS", "Note", "placeholders", "render"]

# key → the English template. Keys of whole notes start with ``note_``; the others are the parts notes are made of.
ENGLISH: dict[str, str] = {
    "note_no_data": "Data not measured ({why}); pass --num-samples N to plan the steps.",
    "why_no_dataset": "no dataset configured",
    "why_error": "{error}",
    "note_eval_separate": "eval_dataset is separate: its size is not counted in train_samples.",
    "note_rounding": "Older transformers rounded steps per epoch down (the published tutorial's 456 steps for 2876 "
    "samples); transformers 5 also steps on the last partial accumulation window, which is what tunekit train does. "
    "Floor rounding would give {floor} per epoch.",
    "note_packing": "packing: {samples} samples make about {seqs} sequences of {tokens} tokens.",
    "note_budget_unmeasured": "max_tokens_per_batch: data not measured, so steps are planned as "
    "per_device_train_batch_size batches; measure the data (dataset on disk) to plan the token-budget batches.",
    "note_budget": "max_tokens_per_batch {budget}: {rows:,} training rows make {batches:,} micro-batches per epoch "
    "(samples per optimizer step vary; per_device_train_batch_size is not used).",
    "note_budget_oversized": "max_tokens_per_batch: {n} sample(s) alone exceed it once padded to a multiple of "
    "{multiple}; each is its own micro-batch.",
    "note_nothing_fits": "Nothing fits on {gpu}: the smallest set-up ({rung}) needs {missing:.1f} GiB more than the "
    "{gib:g} GiB x {share:.2f} usable{gpus}.",
    "tail_gpus": " or {n} GPUs with ZeRO-3",
    **RUNGS,  # an auto-fit set-up's parts (rung, rung_*): also a problem's value, so their one home is config's
    # gradient_checkpointing: auto (plan/checkpointing.py)
    "note_ckpt_planned_on": "gradient_checkpointing auto: planned on; tunekit train turns it off when the run fits "
    "the device without it (give --gpu to see that decision).",
    "note_ckpt": "gradient checkpointing: {state} (auto: {reasons})",
    "ckpt_on": "on",
    "ckpt_off": "off",
    "ckpt_lowest": "on for the lowest {k} of {n} layers",
    "reason_within": "without it this run needs {need:.2f} GiB per device, within {have:.1f} GiB ({device})",
    "reason_force": "set gradient_checkpointing: true to force it",
    "reason_over": "without it this run would need {need:.2f} GiB per device, over {have:.1f} GiB ({device})",
    "reason_lowest": "with the lowest {k} layers checkpointed it needs {gib:.2f} GiB",
    "reason_standard": "without it this run needs {need:.2f} GiB, over the {target:.2f} GiB of the standard recipe "
    "(every layer checkpointed, whole logits)",
    "reason_standard_lowest": "the lowest {k} layers checkpointed bring it to {gib:.2f} GiB for about {share:.0%} of "
    "the step time",
    "reason_rows": "planned at {tokens} tokens per row, from {source}",
    "reason_budget": "planned at max_tokens_per_batch {budget}",
    "device_gpu": "{share:.0%} of the {gpu}'s {gib:.0f} GiB",
    "device_ram": "{share:.0%} of {gib:.0f} GiB RAM{procs}",
    "tail_procs": " / {n} processes",
    # where the planned row length comes from (plan/training_setup.memory_seq_len; also the plan's seq_len_source)
    "source_seq_len": "--seq-len",
    "source_cutoff": "cutoff_len",
    "source_padded": "measured (longest row, padded)",
    "source_padding_free": "measured (longest row, padding-free rows)",
    "source_generation": "{source} + generation_max_new_tokens",
    "source_virtual": "{source} + num_virtual_tokens",
    # memory (plan/memory.py, plan/vision.py)
    "note_cpu_heap": "on the CPU: fragmentation is {gib:.2f} GiB, twice the heap guard's slack (freed tensors glibc "
    "keeps resident; host/heap.py trims them, docs/memory-model.md section 3.8).",
    "note_cpu_share": "on the CPU: fragmentation is {share:.0%} of the token-dependent memory (freed tensors stay in "
    "glibc's heap: resident memory, measured, docs/memory-model.md section 3.7).",
    "note_moe": "{model} is a mixture-of-experts model: the router, the routed rows, LoRA's adapted expert "
    "weights and the aux loss's router softmax are planned for transformers' grouped_mm experts, each layer dense or "
    "sparse as built (docs/memory-model.md 3.1); expert parallelism is not.",
    "note_ref_model": "stage {stage}: a frozen reference model is held (counted in base_weights at this model's size; "
    "with LoRA the policy without its adapter serves instead, no copy; precompute_ref_log_probs frees it before "
    "training).",
    "note_pairs": "stage {stage}: chosen and rejected run together: the activations are those of {seqs} sequences "
    "per micro-batch of {batch}.",
    "note_tower": "{family}: the activations of its {tower} tower are not modelled (its weights and trainable "
    "parameters are; its media tokens are part of the sequence{fixed}).",
    "tower_audio": "audio",
    "tower_vision": "vision",
    "tail_fixed": ", {n} per image without measured data",
    "note_media_cut": "media: {tokens} media tokens per sample alone exceed cutoff_len {cutoff}: tunekit train drops "
    "such samples (an image is never cut) and names them; raise cutoff_len or lower image_max_pixels.",
}

# placeholder → how a tuple of values is joined in English (a placeholder not named here takes no tuple)
JOINS: dict[str, str] = {"reasons": "; ", **RUNG_JOINS}


class Note(Keyed):
    """One note of the planner: the English sentence made from :data:`ENGLISH` ``[key]`` and ``values``.

    ``Note("note_packing", samples=20, seqs=3, tokens=1024)`` is ``"packing: 20 samples make about 3 sequences of 1024
    tokens."``; ``.key`` and ``.values`` keep what it was made of (the machinery: :mod:`tunekit.messages`)."""

    ENGLISH = ENGLISH
    JOINS = JOINS
    WHERE = "tunekit.plan.notes.ENGLISH"
