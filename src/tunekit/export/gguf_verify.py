"""``tunekit verify`` of a GGUF export (``export_format: gguf``), in llama.cpp itself (llama-cpp-python on the CPU).

Checks:

- the file: the ``gguf`` package reads its header (architecture, file type, ``tokenizer.ggml.pre``, tensor types) and
  ``llama_cpp.Llama`` loads it;
- tokens: llama.cpp's tokenizer (special tokens parsed, no BOS added: templates write it) gives, for chat-templated
  conversations, exactly the ids tunekit's training pipeline gives (each template piece tokenized on its own,
  ``ProcessContext.encode_pieces``), for a whole training conversation and for its generation prompt; and the GGUF's
  own chat template, rendered as llama-cpp-python renders it, gives that same prompt;
- numbers, against transformers on the model the GGUF was made from (base + adapters in fp32, as recorded):
  float types (f32, f16, bf16): the next-token logits of the generation prompt are within the bound below;
  quantized types (q8_0, q4_k_m): transformers' greedy continuation of ``GREEDY_TOKENS`` tokens is fed to llama.cpp
  (teacher forcing); at every step the logits are within the bound, and the top-1 tokens agree wherever transformers'
  top-1 margin exceeds twice the bound (either logit may move by the bound); steps below that margin are counted.

The bound (first-order forward error, per file type). llama.cpp rounds each weight to the file's type (relative error
``u_w``: 2^-24 f32, 2^-11 f16, 2^-8 bf16, plus the merged model's own dtype's; for block types relative to the block's
largest weight: q8_0 1/254, q4_k_m's coarsest type q4_K 1/15, plus the f16 block scale) and each matrix product's input
to its dot product's type (``u_a``: the same for f32/f16/bf16; q8_0 blocks for q8_0; q8_K for q4_K). A dot product of
rounded inputs summed in fp32 is off by at most ``u_w Σ|w||x| + u_a Σ|w||x| + γ_n Σ|w||x|`` (``γ_n = n·2^-24 / (1 -
n·2^-24)``, n the widest product; for block types |w| (|x|) in the first (second) term is its block's largest). Each of
the 4L product stages of the layers (attention in/out, MLP in/out) adds such an error to the residual stream relative
to the stream's largest entry, assuming no stage amplifies it (first order); the final norm carries it to the head's
input h scaled by its per-channel gain g. The head is the last rounded product. So, per logit i::

    |Δlogit_i| <= 4L (u_w + u_a + γ_n) Σ_j |W_ij| |g_j| max|x̂|
                 + u_w Σ_j Wb_ij |h_j| + u_a Σ_j |W_ij| hb_j + γ_n Σ_j |W_ij| |h_j|

with W the output head, h = g ⊙ x̂ its input from transformers (x̂ the normalized stream), Wb / hb = |W| / |h| for
float types and the block maxima for block types; the check takes the largest over i. The KV cache is kept in f32 for
the check (llama.cpp's default f16 cache is a runtime choice, not part of the file). The report prints the measured
difference next to the bound.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..config.problems import Said
from ..config.schema import Config
from ..data.processors.context import ProcessContext
from ..data.templates import get_template
from .checks import problem, reference_model, skip

GREEDY_TOKENS = 16
#: per file type: (u_w, u_a, weight block, activation block) of the first-order bound (module docstring)
ROUNDING = {
    "f32": (2.0**-24, 2.0**-24, 1, 1),
    "f16": (2.0**-11, 2.0**-11, 1, 1),
    "bf16": (2.0**-8, 2.0**-8, 1, 1),
    "q8_0": (1 / 254 + 2.0**-11, 1 / 254 + 2.0**-11, 32, 32),
    "q4_k_m": (1 / 15 + 2.0**-11, 1 / 254, 32, 256),
}
_DTYPE_ROUNDING = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
_CONVERSATION = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello, how can I help?"},
    {"role": "user", "content": "Tell me a joke about 42 cats."},
]
_REPLY = {"role": "assistant", "content": "Why 42? Because."}


def verify_gguf_export(path: Path, report: dict, reference_cfg: Config | None, why_not: str | None) -> dict:
    """``report`` (with ``provenance``) filled by the checks above; ``reference_cfg``: base + adapters to compare with,
    or None with ``why_not`` (the numeric check is then skipped, never passed)."""
    provenance = report["provenance"]
    file = path / str(provenance.get("gguf_file"))
    if not file.is_file():
        problem(report, Said("verify_gguf_missing", file=file.name, path=str(path)))
        return report
    kind = provenance.get("gguf_type")
    _read_header(file, report)
    llm = _load(file, report)
    if llm is None:
        return report
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    template = get_template(
        provenance["template"],
        tokenizer,
        tool_format=provenance.get("tool_format"),
        empty_eos=provenance.get("empty_template_eos", True),
    )
    ctx = ProcessContext(
        tokenizer,
        template,
        cutoff_len=10**6,
        enable_thinking=provenance.get("enable_thinking", True),
        default_system=provenance.get("default_system"),
    )
    prompt_ids = _check_tokens(llm, ctx, report)
    if prompt_ids is None:
        return report
    if reference_cfg is None:
        skip(report, "gguf_logits", why_not or "the model the GGUF was made from is not found here")
        return report
    reference = reference_model(reference_cfg)
    u_w, u_a, blk_w, blk_a = ROUNDING[kind]
    u_w += _DTYPE_ROUNDING.get(provenance.get("merged_dtype"), 0.0)
    rates = (u_w, u_a, blk_w, blk_a)
    if kind in ("q8_0", "q4_k_m"):
        _check_greedy(llm, reference, prompt_ids, rates, kind, report)
    else:
        _check_logits(llm, reference, prompt_ids, rates, kind, report)
    return report


def _read_header(file: Path, report: dict) -> None:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(file))
    except (ValueError, OSError, IndexError) as exc:  # not a GGUF file, or a truncated one
        problem(report, Said("verify_gguf_unreadable", file=file.name, error=str(exc).splitlines()[0][:300]))
        return

    def field(name: str):
        entry = reader.fields.get(name)
        return entry.contents() if entry is not None else None

    types = Counter(t.tensor_type.name for t in reader.tensors)
    report["checks"]["gguf_file"] = (
        f"{file.name}: {field('general.architecture')}, {len(reader.tensors)} tensors "
        f"({', '.join(f'{n} {k}' for k, n in sorted(types.items()))}), tokenizer.ggml.pre "
        f"{field('tokenizer.ggml.pre')!r}"
    )


def _load(file: Path, report: dict):
    import llama_cpp

    try:
        llm = llama_cpp.Llama(
            model_path=str(file),
            n_ctx=512,
            n_gpu_layers=0,
            logits_all=True,
            verbose=False,
            type_k=llama_cpp.GGML_TYPE_F32,
            type_v=llama_cpp.GGML_TYPE_F32,
        )
    except (ValueError, RuntimeError) as exc:  # llama.cpp refused the file
        problem(report, Said("verify_gguf_load_failed", file=file.name, error=str(exc).splitlines()[0][:300]))
        return None
    report["checks"]["llama_cpp_load"] = f"llama_cpp.Llama on the CPU, {llm.n_vocab()} tokens in the vocabulary"
    return llm


def _check_tokens(llm, ctx: ProcessContext, report: dict) -> list[int] | None:
    """llama.cpp's ids == training's on a whole conversation and on its generation prompt; the prompt's ids."""
    # history in its official (inference) form, as mask_history / rm / dpo / kto train it: the prompt before the last
    # reply is then the generation prompt chat and the runtimes render (Qwen3 drops earlier replies' thoughts)
    turns = ctx.render_turns(_CONVERSATION + [_REPLY], None, None, history_trained=False)
    pieces = [piece for turn in turns for piece in turn]
    piece_ids = ctx.encode_pieces(pieces)
    trained = [i for ids in piece_ids for i in ids]
    prompt = [i for ids in piece_ids[:-1] for i in ids]  # training's ids of the prompt before the last reply
    prompt_text = "".join(pieces[:-1])
    for kind, text, want in (
        (Said("part_verify_gguf_conversation"), "".join(pieces), trained),
        (Said("part_verify_gguf_prompt"), prompt_text, prompt),
    ):
        got = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            said = Said(
                "verify_gguf_tokens_differ",
                text_kind=kind,
                token=at,
                ours=str(got[at : at + 5]),
                trained=str(want[at : at + 5]),
                ours_count=len(got),
                trained_count=len(want),
                text=repr(text),
            )
            problem(report, said)
            return None
    if not _check_embedded_template(llm, ctx, prompt_text, report):
        return None
    report["checks"]["gguf_tokens"] = (
        f"llama.cpp's ids == training's on a templated conversation ({len(trained)} tokens) and its generation "
        f"prompt ({len(prompt)} tokens)"
    )
    return prompt


def _reference_pass(reference, ids: list[int]):
    """transformers' logits and the head's input (last hidden state) at every position, and the head's weight."""
    import torch

    with torch.inference_mode():
        out = reference(input_ids=torch.tensor([ids]), output_hidden_states=True)
    head = reference.get_output_embeddings().weight.float()
    return out.logits[0].double(), out.hidden_states[-1][0].double(), head.double()


def _block_max(x, blk: int):
    """|x| with each entry replaced by the largest |x| of its block of ``blk`` along the last axis."""
    n = x.shape[-1]
    blk = max(b for b in (1, 8, 16, 32, blk) if b <= blk and n % b == 0)  # a row shorter than a block: smaller
    return x.abs().reshape(*x.shape[:-1], n // blk, blk).amax(-1).repeat_interleave(blk, -1)


def _norm_gain(reference, width: int):
    """The final norm's effective per-channel gain g (h = g * x / rms(x)): the norm applied to a vector of ones (w for
    Llama / Qwen / GLM, 1 + w for Gemma); None when the decoder has no final ``norm``."""
    import torch

    decoder = reference.get_decoder() if hasattr(reference, "get_decoder") else None
    norm = getattr(decoder, "norm", None)
    if norm is None:
        return None
    with torch.inference_mode():
        return norm(torch.ones(1, width, dtype=next(norm.parameters()).dtype))[0].double()


def _bounds(reference, head, hidden, rates: tuple) -> tuple:
    """The bound per position of ``hidden`` (module docstring), and the number of rounded stages."""
    u_w, u_a, blk_w, blk_a = rates
    config = reference.config
    layers = int(getattr(config, "num_hidden_layers", 1))
    n = max(int(getattr(config, "hidden_size", 1)), int(getattr(config, "intermediate_size", 0) or 0))
    gamma = n * 2.0**-24 / (1 - n * 2.0**-24)
    h, w = hidden.abs(), head.abs()
    # the head's own products: weights rounded within their blocks, its input within its blocks, fp32 sums
    own = u_w * (h @ _block_max(head, blk_w).T) + u_a * (_block_max(hidden, blk_a) @ w.T) + gamma * (h @ w.T)
    # the 4L stages before it: errors relative to the stream's largest entry, carried to h by the final norm's gain
    gain = _norm_gain(reference, hidden.shape[-1])
    if gain is None or bool((gain == 0).any()):
        carried = h.amax(-1, keepdim=True).expand_as(h)
    else:
        carried = gain.abs() * (hidden / gain).abs().amax(-1, keepdim=True)
    stream = (4 * layers) * (u_w + u_a + gamma) * (carried @ w.T)
    return (stream + own).amax(-1), 4 * layers + 1


def _llama_logits(llm, ids: list[int]):
    import torch

    llm.reset()
    llm.eval(ids)
    return torch.from_numpy(llm.scores[: len(ids)].copy()).double()


def _check_logits(llm, reference, prompt: list[int], rates: tuple, kind: str, report: dict) -> None:
    logits, hidden, head = _reference_pass(reference, prompt)
    bounds, stages = _bounds(reference, head, hidden[-1:], rates)
    bound = float(bounds[0])
    ours = _llama_logits(llm, prompt)
    diff = float((ours[-1, : logits.shape[-1]] - logits[-1]).abs().max())
    report["max_abs_logit_diff"], report["logit_bound"] = diff, bound
    effect = _adapter_effect(reference, prompt, logits[-1])
    moved = Said("part_verify_gguf_effect", effect=effect) if effect is not None else None
    detail = Said("part_verify_gguf_logits", kind=kind, diff=diff, bound=bound, stages=stages, adapter_effect=moved)
    if not diff <= bound:
        problem(report, Said("verify_gguf_logits_above", detail=detail))
    report["checks"]["gguf_logits"] = detail


def _check_greedy(llm, reference, prompt: list[int], rates: tuple, kind: str, report: dict) -> None:
    """Teacher-forced: transformers' greedy continuation fed to llama.cpp. At every step the logits must stay within
    the bound; the top-1 tokens must agree where transformers' top-1 margin exceeds twice the bound."""
    import torch

    with torch.inference_mode():
        out = reference.generate(
            input_ids=torch.tensor([prompt]), max_new_tokens=GREEDY_TOKENS, min_new_tokens=GREEDY_TOKENS,
            do_sample=False,
        )  # fmt: skip
    ids = out[0].tolist()
    logits, hidden, head = _reference_pass(reference, ids)
    steps = list(range(len(prompt) - 1, len(ids) - 1))  # the position whose next token is ids[k + 1]
    bounds, _ = _bounds(reference, head, hidden[steps], rates)
    ours = _llama_logits(llm, ids)[steps, : logits.shape[-1]]
    ref = logits[steps]
    diffs = (ours - ref).abs().amax(-1)
    top = torch.topk(ref, 2).values
    judged = (top[:, 0] - top[:, 1]) > 2 * bounds
    same = ours.argmax(-1) == torch.tensor(ids[len(prompt) :])
    wrong = [j for j in range(len(steps)) if judged[j] and not same[j]]
    over = [j for j in range(len(steps)) if diffs[j] > bounds[j]]
    report["max_abs_logit_diff"], report["logit_bound"] = float(diffs.max()), float(bounds.max())
    detail = Said(
        "part_verify_gguf_greedy",
        kind=kind,
        steps=len(steps),
        diff=float(diffs.max()),
        bound=float(bounds[int(diffs.argmax())]),
        same=int(same.sum()),
        judged=int(judged.sum()),
    )
    if over:
        problem(report, Said("verify_gguf_greedy_above", detail=detail, at_steps=str(over)))
    if wrong:
        problem(report, Said("verify_gguf_greedy_top1", detail=detail, at_steps=str(wrong)))
    report["checks"]["gguf_greedy"] = detail


def _check_embedded_template(llm, ctx: ProcessContext, prompt_text: str, report: dict) -> bool:
    """The GGUF's own chat template, rendered as llama-cpp-python renders it (``Jinja2ChatFormatter``, the template
    runtimes built on llama.cpp use), gives the generation prompt tunekit's template gives."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    embedded = llm.metadata.get("tokenizer.chat_template")
    if not embedded:
        problem(report, Said("verify_gguf_no_template"))
        return False

    def text(token: int) -> str:
        return llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    formatter = Jinja2ChatFormatter(embedded, eos_token=text(llm.token_eos()), bos_token=text(llm.token_bos()))
    system = [{"role": "system", "content": ctx.default_system}] if ctx.default_system else []
    rendered = formatter(messages=system + _CONVERSATION, enable_thinking=ctx.enable_thinking).prompt
    if rendered != prompt_text:
        said = Said(
            "verify_gguf_template_differs", rendered=repr(rendered), template=ctx.template.name, ours=repr(prompt_text)
        )
        problem(report, said)
        return False
    return True


def _adapter_effect(reference, ids: list[int], logits) -> float | None:
    """How far the adapters move the next-token logits (a GGUF of the base alone would be off by this much)."""
    import torch

    if not hasattr(reference, "disable_adapter"):
        return None
    with torch.inference_mode(), reference.disable_adapter():
        base = reference(input_ids=torch.tensor([ids])).logits[0, -1].double()
    return float((logits - base).abs().max())
