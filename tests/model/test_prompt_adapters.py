"""finetuning_type ptuning (P-Tuning v2, PEFT prefix tuning) and prompt (PEFT prompt tuning): only the prefix / virtual
tokens train, exactly as many parameters as PEFT creates (and the planner counts), the loss is the causal-LM loss of
the batch computed by hand with the virtual tokens, and the trained adapter reloads in plain peft with the logits of
the end of training."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tests.prompt_adapter_helpers import peft_prompt_model
from tests.tolerances import FP32_U, FP64_U, loss_tolerance, sum_order_bound
from tunekit.config import load_config

PTUNING = dict(finetuning_type="ptuning", pre_seq_len=4)
PROJECTED = dict(finetuning_type="ptuning", pre_seq_len=3, prefix_projection=True, prefix_hidden_size=16)
PROMPT = dict(finetuning_type="prompt", num_virtual_tokens=5)
METHODS = {"ptuning": PTUNING, "ptuning-projected": PROJECTED, "prompt": PROMPT}


def _sizes(config) -> tuple[int, int, int]:
    """(layers, hidden, key/value width of a layer) read from config.json."""
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return config["num_hidden_layers"], config["hidden_size"], head_dim * config.get("num_key_value_heads", heads)


def expected_trainable(model_dir, opts: dict) -> int:
    """The prompt parameters, written out: prefix = layers x 2 x kv_dim per prefix position; with the projection an
    n x kv_dim embedding and the MLP kv_dim -> h -> layers x 2 x kv_dim; prompt tuning n x hidden."""
    layers, hidden, kv = _sizes(json.loads((model_dir / "config.json").read_text()))
    if opts["finetuning_type"] == "prompt":
        return opts["num_virtual_tokens"] * hidden
    n, out = opts["pre_seq_len"], layers * 2 * kv
    if not opts.get("prefix_projection"):
        return n * out
    h = opts["prefix_hidden_size"]
    return n * kv + (kv * h + h) + (h * out + out)


def _trainer(model_dir, tmp_path, opts, **overrides):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import sft

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    cfg = load_config(None, base_config(model_dir, data, tmp_path / "out", **{**opts, **overrides}))
    tokenizer = load_tokenizer(cfg)
    prepared = prepare_datasets(cfg, tokenizer, "sft")
    model = load_model(cfg, tokenizer)
    return cfg, sft.build_trainer(cfg, build_training_arguments(cfg, []), model, tokenizer, prepared, [])


@pytest.mark.parametrize("fixture", ["tiny_qwen", "tiny_llama"])
@pytest.mark.parametrize("method", list(METHODS))
def test_only_the_prompt_trains_as_many_parameters_as_peft_creates_and_the_plan_counts(fixture, method, request):
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup

    model_dir = request.getfixturevalue(fixture)
    opts = METHODS[method]
    cfg = load_config(None, {"model_name_or_path": str(model_dir), "template": "qwen", **opts})
    model = load_model(cfg, load_tokenizer(cfg))
    trained = {name: p.numel() for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all(name.startswith("prompt_encoder.default.") for name in trained), sorted(trained)
    assert sum(trained.values()) == expected_trainable(model_dir, opts)
    counts = count_params(load_shape(None, str(model_dir)), resolve_setup(cfg))
    assert (counts.trainable, counts.trainable_tensors) == (sum(trained.values()), len(trained))
    assert counts.frozen == sum(p.numel() for p in model.get_base_model().parameters())


def _manual_loss(model, batch, dtype) -> tuple[torch.Tensor, int]:
    """The mean next-token cross-entropy of ``batch`` with the trained prefix / prompt put in by hand (no peft
    forward): a prefix is each layer's first keys and values (attention mask widened by them, positions after them),
    a prompt the first input embeddings (their logits dropped)."""
    from transformers import DynamicCache

    base, config = model.get_base_model(), model.active_peft_config
    weight = model.prompt_encoder["default"].embedding.weight
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    rows, n = ids.shape[0], config.num_virtual_tokens
    wide_mask = torch.cat([torch.ones(rows, n, dtype=mask.dtype), mask], dim=1)
    if config.peft_type == "PREFIX_TUNING":
        heads = config.num_attention_heads
        kv = weight.view(n, config.num_layers * 2, heads, -1).permute(1, 2, 0, 3)  # [2 x layers, heads, n, head_dim]
        cache = DynamicCache()
        for layer in range(config.num_layers):
            key, value = (kv[2 * layer + i].unsqueeze(0).expand(rows, -1, -1, -1) for i in (0, 1))
            cache.update(key, value, layer)
        logits = base(input_ids=ids, attention_mask=wide_mask, past_key_values=cache).logits
    else:
        embeds = torch.cat([weight.unsqueeze(0).expand(rows, -1, -1), base.get_input_embeddings()(ids)], dim=1)
        logits = base(inputs_embeds=embeds, attention_mask=wide_mask).logits[:, n:]
    targets = labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].to(dtype).reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )
    return loss, int((targets != -100).sum())


@pytest.mark.parametrize("method", ["ptuning", "prompt"])
def test_the_loss_is_the_batch_s_cross_entropy_with_the_virtual_tokens(method, tiny_qwen, tmp_path):
    """In float64, on a right-padded batch of unequal rows: tunekit's loss (the trained-token head in chunks for
    ptuning, peft's padded labels and transformers' float32 loss for prompt) equals the hand computation, done in the
    loss's dtype. The bound: two summation orders of the mean in that dtype (u), one rounding of each logit to it, and
    two orders of each logit's dot product over the hidden size in float64 (the head runs in chunks)."""
    cfg, trainer = _trainer(tiny_qwen, tmp_path, METHODS[method], dtype="float64", per_device_train_batch_size=4)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    assert len({int(m.sum()) for m in batch["attention_mask"]}) > 1  # padded rows: the mask matters
    model = trainer.model
    torch.manual_seed(0)
    with torch.no_grad():  # a trained-looking prompt, not PEFT's initial values
        for p in model.prompt_encoder.parameters():
            p.normal_(0.0, 0.5)
        loss = trainer.compute_loss(model, dict(batch))
        manual, n_tokens = _manual_loss(model, batch, loss.dtype)
        out = model(**{k: v for k, v in batch.items() if k != "labels"}, output_hidden_states=True)
        head = model.get_output_embeddings().weight
        dot_terms = float((out.hidden_states[-1].abs() @ head.abs().T).max())  # max over logits of sum |h_i w_i|
    assert loss.dtype == {"ptuning": torch.float64, "prompt": torch.float32}[method]
    u = FP64_U if loss.dtype == torch.float64 else FP32_U
    hidden = head.shape[1]
    bound = (
        loss_tolerance(n_tokens, float(manual), u)
        + 4 * u * float(out.logits.abs().max())
        + 4 * sum_order_bound(hidden, dot_terms, FP64_U)
    )
    assert abs(float(loss) - float(manual)) <= bound, (float(loss), float(manual), bound)


PREFIX_CHECKPOINTING_WHY = (
    "its prefix reaches every layer's attention as a KV cache, which transformers' checkpointed decoder layers drop "
    "(a layer replayed in backward would write its keys into the cache again), and peft refuses prefix tuning on a "
    "checkpointed model"
)


def test_auto_gradient_checkpointing_is_off_for_a_prefix_in_the_run_and_the_plan(tiny_qwen, tmp_path):
    """peft refuses prefix tuning on a checkpointed model: ``auto`` decides off for ptuning from the config alone (no
    memory plan), the run prints why, the planner plans it off, and the model the run builds checkpoints no layer."""
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.decide import decide_run
    from tunekit.plan.training_setup import planned_machine, resolve_setup
    from tunekit.train.decisions import Decision, decide_features

    why = f"auto: finetuning_type ptuning: {PREFIX_CHECKPOINTING_WHY}"
    for device in ({"use_cpu": True}, {}):  # a CPU run (its RAM is the budget) and a GPU run
        cfg = load_config(None, base_config(tiny_qwen, tmp_path / "data", tmp_path / "out", **PTUNING, **device))
        assert cfg.gradient_checkpointing == "auto"
        machine = planned_machine(cfg, 1)
        decisions = decide_run(cfg, machine)  # what tunekit train takes (tunekit/flow.py)
        assert decisions.gradient_checkpointing == Decision(False, why, (None, False))
        assert decisions.checkpointing_note == f"gradient checkpointing: off ({why})"
        assert decisions == decide_features(cfg, machine)  # what tunekit plan takes
        setup = resolve_setup(decisions.cfg, 1, 1, 64, decisions)
        assert (setup.grad_ckpt, setup.ckpt_layers) == (False, None)
    model = load_model(decisions.cfg, load_tokenizer(decisions.cfg))
    assert [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)] == []
    lora = load_config(None, base_config(tiny_qwen, tmp_path / "data", tmp_path / "out"))
    assert decide_features(lora, machine).gradient_checkpointing.detail == (None, True)  # other methods: planned


@pytest.mark.parametrize("method", list(METHODS))
def test_sft_trains_the_prompt_and_plain_peft_reloads_the_logits_of_the_end_of_training(method, tiny_qwen, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tunekit.model.loader import load_model, load_tokenizer

    opts = METHODS[method]
    cfg, trainer = _trainer(tiny_qwen, tmp_path, opts, max_steps=3, learning_rate=1e-2)
    before = {k: v.detach().clone() for k, v in trainer.model.prompt_encoder.state_dict().items()}
    base_before = {k: v.detach().clone() for k, v in trainer.model.get_base_model().state_dict().items()}
    trainer.train()
    out = tmp_path / "adapter"
    trainer.save_model(str(out))
    after = trainer.model.prompt_encoder.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)  # every prompt tensor trained
    assert all(torch.equal(v, trainer.model.get_base_model().state_dict()[k]) for k, v in base_before.items())
    saved = json.loads((out / "adapter_config.json").read_text())
    assert saved["peft_type"] == {"ptuning": "PREFIX_TUNING", "prompt": "PROMPT_TUNING"}[opts["finetuning_type"]]
    assert saved["num_virtual_tokens"] == opts.get("pre_seq_len", opts.get("num_virtual_tokens"))

    ids = torch.tensor([[1, 5, 9, 13, 17, 21, 25]])
    with torch.no_grad():
        end = trainer.model.eval()(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
        base_logits = base(input_ids=ids).logits
        plain = PeftModel.from_pretrained(base, str(out)).eval()(input_ids=ids).logits
        served_cfg = load_config(
            None, {"model_name_or_path": str(tiny_qwen), "template": "qwen", "adapter_name_or_path": str(out)}
        )
        served = load_model(served_cfg, load_tokenizer(served_cfg), is_trainable=False)(input_ids=ids).logits
    assert plain.shape[1] == ids.shape[1] + saved["num_virtual_tokens"] * (saved["peft_type"] == "PROMPT_TUNING")
    assert (plain[:, -ids.shape[1] :] - base_logits).abs().max() > 1e-3  # the adapter changes the model
    # the same float32 operations on the same saved numbers (the projected prefix is what the MLP computed)
    assert torch.equal(plain, end)
    assert torch.equal(served, end)  # tunekit's chat / predict path loads it unmerged


@pytest.mark.parametrize("kind", ["ptuning", "prompt"])
def test_chat_and_predict_generate_what_plain_peft_generates(kind, tiny_qwen, tmp_path):
    """tunekit's one generation path (chat and the API stream, predict batches) loads the adapter unmerged from
    adapter_config.json, and its greedy reply is the argmax of a full forward of plain peft at every step (peft's own
    generate ignores the prefix in this transformers: model/prompt_adapters.fixed_generation)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tunekit.infer.engine import ChatEngine

    model = peft_prompt_model(tiny_qwen, kind, steer=True)  # values that change the tiny model's greedy reply
    ids = [5, 17, 33, 99, 120, 7, 42, 11] if kind == "ptuning" else [9]
    adapter = tmp_path / "adapter"
    model.save_pretrained(str(adapter))

    cfg = load_config(
        None, {"model_name_or_path": str(tiny_qwen), "template": "qwen", "adapter_name_or_path": str(adapter)}
    )
    engine = ChatEngine(cfg)
    generation = engine.start_ids(ids, max_new_tokens=8, do_sample=False)  # what chat and the API stream
    streamed = "".join(generation)
    batched = engine.generate_batch([ids], max_new_tokens=8, do_sample=False)[0].text  # what predict runs

    base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
    plain = PeftModel.from_pretrained(base, str(adapter)).eval()

    def greedy(forward) -> str:
        new: list[int] = []
        with torch.no_grad():
            while len(new) < 8 and not (new and new[-1] in engine.stop_ids):
                new.append(int(forward(input_ids=torch.tensor([ids + new])).logits[0, -1].argmax()))
        return engine.decode([t for t in new if t not in engine.stop_ids])

    expected = greedy(plain)
    assert expected != greedy(base)  # the prefix / prompt changes the reply
    assert streamed == batched == expected
    # unmerged: the adapter is applied
    assert engine.model.active_peft_config.peft_type == model.active_peft_config.peft_type
    prompt = torch.tensor([ids])
    with torch.no_grad():
        assert (engine.model(input_ids=prompt).logits[0, -1] - base(input_ids=prompt).logits[0, -1]).abs().max() > 1e-3
