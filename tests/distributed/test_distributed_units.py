"""Launcher, presets and TrainingArguments kwargs of distributed training, without starting ranks (fast)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.train.engines import distributed, launcher
from tunekit.train.engines.deepspeed_config import (
    PRESETS,
    check_batch_fields,
    preset_config,
    read_deepspeed,
    resolve_deepspeed,
)

# LLaMA-Factory's examples/deepspeed/ds_z3_config.json, field for field (users pass these files as they are).
LLAMAFACTORY_Z3 = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_allow_untested_optimizer": True,
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "sub_group_size": 1e9,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
}
CPU_ENV = {"CUDA_VISIBLE_DEVICES": ""}


def _cfg(**values):
    return load_config(None, {"model_name_or_path": "m", "output_dir": "o", **values})


# ------------------------------------------------------------------ launch plan
def test_no_launch_on_one_cpu_process():
    plan = launcher.launch_plan(CPU_ENV)
    assert (plan.launch, plan.world_size, plan.nproc_per_node) == (False, 1, 1)


def test_force_torchrun_with_nproc_per_node_on_cpu():
    plan = launcher.launch_plan({**CPU_ENV, "FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"})
    assert (plan.launch, plan.world_size, plan.nnodes, plan.node_rank, plan.master_addr, plan.master_port) == (
        True,
        2,
        1,
        0,
        "127.0.0.1",
        None,
    )


def test_visible_gpus_start_one_process_each_without_importing_torch():
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert launcher.visible_device_count(env) == 2
    assert launcher.visible_device_count({"CUDA_VISIBLE_DEVICES": "-1"}) == 0
    plan = launcher.launch_plan(env)
    assert plan.launch and plan.nproc_per_node == 2  # the visible count, not the machine's (LLaMA-Factory #7215)
    assert launcher.launch_plan({**env, "NPROC_PER_NODE": "1"}).nproc_per_node == 1
    with pytest.raises(ConfigError, match=r"NPROC_PER_NODE=4 but only 2 GPU\(s\) are visible"):
        launcher.launch_plan({**env, "NPROC_PER_NODE": "4"})


def test_no_relaunch_under_an_external_launcher():
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        assert not launcher.launch_plan({**CPU_ENV, "FORCE_TORCHRUN": "1", var: "0"}).launch


def test_multi_node_needs_master_addr_and_defaults_the_port():
    with pytest.raises(ConfigError, match="set MASTER_ADDR to the address of the NODE_RANK=0 machine"):
        launcher.launch_plan({**CPU_ENV, "NNODES": "2"})
    plan = launcher.launch_plan(
        {**CPU_ENV, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.5", "NPROC_PER_NODE": "4"}
    )
    assert (plan.launch, plan.world_size, plan.master_addr, plan.master_port) == (True, 8, "10.0.0.5", 29500)
    with pytest.raises(ConfigError, match="NODE_RANK=2 must be below NNODES=2"):
        launcher.launch_plan({**CPU_ENV, "NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "h"})
    with pytest.raises(ConfigError, match="NPROC_PER_NODE='two' is not a whole number"):
        launcher.launch_plan({**CPU_ENV, "NPROC_PER_NODE": "two"})


def test_torchrun_command_reexecutes_tunekit_train():
    plan = launcher.launch_plan({**CPU_ENV, "FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"})
    cmd = launcher.torchrun_command(plan, 12345, ["cfg.yaml", "lr=1"])
    assert cmd[:3] == [
        sys.executable,
        "-m",
        "tunekit.train.engines.launcher",
    ]  # torchrun, minus its own traceback on failure
    assert cmd[cmd.index("--nproc_per_node") + 1] == "2" and cmd[cmd.index("--master_port") + 1] == "12345"
    assert cmd[-5:] == ["-m", "tunekit.cli.main", "train", "cfg.yaml", "lr=1"]


def test_deepspeed_and_fsdp_always_run_under_torchrun(monkeypatch):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "FORCE_TORCHRUN", "NPROC_PER_NODE", "NNODES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not distributed._plan(_cfg()).launch
    plan = distributed._plan(_cfg(deepspeed="z2"))
    assert plan.launch and plan.world_size == 1  # one process, but with torch.distributed set up (LLaMA-Factory #4077)


def test_busy_master_port_is_named_in_the_error():
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"MASTER_PORT {port} is already in use on this machine"):
            launcher.check_port_free(port)


def test_cli_reports_busy_port_once_before_starting_ranks(tmp_path, tiny_qwen):
    from tests.helpers import alpaca_records, base_config, write_dataset

    write_dataset(tmp_path, "toy", alpaca_records(4, seed=1))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        json.dumps(base_config(tiny_qwen, tmp_path, tmp_path / "out"))
    )  # passes preflight: the port is the problem
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        env = {**os.environ, **CPU_ENV, "FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2", "MASTER_PORT": str(port)}
        for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            env.pop(var, None)
        proc = subprocess.run(
            [sys.executable, "-m", "tunekit.cli.main", "train", str(cfg)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    assert f"error: MASTER_PORT {port} is already in use" in proc.stderr
    assert "starting 2 processes" not in proc.stderr


# ------------------------------------------------------------------ failure summary
TORCHRUN_TAIL = """
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_09:32:14
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 26305)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 26305
============================================================
"""


def test_summary_names_the_killed_rank_not_the_peer_that_lost_it():
    errors = {0: "RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer."}
    text = launcher.failure_summary(1, TORCHRUN_TAIL, errors)
    assert text.startswith("error: distributed training failed: rank 1 (local rank 1) was killed by SIGKILL")
    assert "out-of-memory killer" in text and "local rank(s) 0" in text


# A busy machine: torchrun polled after rank 0 had already written its error (the lost connection to the killed rank
# 1), so its table puts the survivor under "Root Cause" and the killed rank among the other failures.
SURVIVOR_FIRST_TAIL = """
============================================================
tunekit.cli.main FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-30_09:32:15
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 26305)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 26305
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_09:32:14
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 26304)
  error_file: /tmp/tunekit-torchrun-x/run/attempt_0/0/error.json
  traceback : RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer.
============================================================
"""


@pytest.mark.parametrize(
    "errors", [{0: "RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer."}, {}]
)
def test_summary_names_the_killed_rank_whichever_exit_torchrun_saw_first(errors):
    failures = launcher.rank_failures(SURVIVOR_FIRST_TAIL)
    assert [(f.rank, f.exitcode, f.signal, f.root) for f in failures] == [
        (1, -9, "SIGKILL", False),
        (0, 1, None, True),
    ]
    text = launcher.failure_summary(1, SURVIVOR_FIRST_TAIL, errors)
    assert text.startswith("error: distributed training failed: rank 1 (local rank 1) was killed by SIGKILL; "), text
    assert text.endswith(" The other ranks stopped because of it (local rank(s) 0)."), text
    # without a signal, the rank whose error is its own (not a lost peer) is the cause,
    # though torchrun saw the other first
    own = SURVIVOR_FIRST_TAIL.replace("-9 (pid: 26305)  (SIGKILL)", "2 (pid: 26305)")
    text = launcher.failure_summary(1, own, {**errors, 1: "ConfigError: dataset 'toy' has no records."})
    assert text.startswith(
        "error: distributed training failed: rank 1 (local rank 1) stopped first with: dataset 'toy' has no records."
    ), text


def test_summary_shows_the_failing_ranks_own_error_and_timeout_hints(tmp_path, monkeypatch):
    error_file = tmp_path / "run_x" / "attempt_0" / "1" / "error.json"
    error_file.parent.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    distributed.record_rank_error(ConfigError("dataset 'toy' has no records."))
    errors = launcher.read_error_files(str(tmp_path))
    assert errors == {1: "ConfigError: dataset 'toy' has no records."}
    tail = TORCHRUN_TAIL.replace("-9 (pid: 26305)  (SIGKILL)", "2 (pid: 26305)")
    text = launcher.failure_summary(1, tail, errors)
    assert (
        text == "error: distributed training failed: rank 1 (local rank 1) stopped first with: dataset 'toy' has no "
        "records."
    )
    timeout = launcher.failure_summary(1, "", {0: "DistBackendError: Watchdog caught collective operation timeout"})
    assert "NCCL_SOCKET_IFNAME" in timeout and "ddp_timeout" in timeout and "NCCL_DEBUG=INFO" in timeout


# ------------------------------------------------------------------ DeepSpeed configs
@pytest.mark.parametrize("name", PRESETS)
def test_presets_have_llamafactory_shape(name):
    config = preset_config(name)
    for key in (
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
    ):
        assert config[key] == "auto"
    assert config["bf16"] == {"enabled": "auto"} and config["fp16"]["enabled"] == "auto"
    settings = read_deepspeed(name)
    assert settings.stage == int(name[1])
    assert settings.offload_optimizer == name.endswith("offload")
    assert settings.offload_param == (name == "z3_offload")
    if settings.stage == 3:
        assert settings.gathers_16bit_weights


def test_preset_is_written_to_output_dir(tmp_path):
    path = resolve_deepspeed("z3_offload", tmp_path / "out")
    assert path == str((tmp_path / "out" / "ds_config.json").resolve())
    assert json.loads(Path(path).read_text()) == preset_config("z3_offload")


def test_llamafactory_file_is_used_unchanged(tmp_path):
    user = tmp_path / "ds_z3_config.json"
    user.write_text(json.dumps(LLAMAFACTORY_Z3))
    assert resolve_deepspeed(str(user), tmp_path / "out") == str(user.resolve())
    assert not (tmp_path / "out").exists()


def test_zero3_file_without_gather_gets_it_in_a_copy(tmp_path):
    config = json.loads(json.dumps(LLAMAFACTORY_Z3))
    del config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]
    user = tmp_path / "mine.json"
    user.write_text(json.dumps(config))
    written = json.loads(Path(resolve_deepspeed(str(user), tmp_path / "out")).read_text())
    assert written["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert json.loads(user.read_text()) == config  # the user's file is not touched


def test_deepspeed_value_errors(tmp_path):
    with pytest.raises(
        ConfigError, match=r"neither a preset \(a preset name: z0, z1, z2, z2_offload, z3, z3_offload\)"
    ):
        read_deepspeed("z4")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        read_deepspeed(str(bad))
    bad.write_text(json.dumps({"zero_optimization": {"stage": 5}}))
    with pytest.raises(ConfigError, match="must be 0, 1, 2 or 3, got 5"):
        read_deepspeed(str(bad))


def test_numeric_batch_fields_must_match_world_size(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**LLAMAFACTORY_Z3, "train_batch_size": 16}))
    settings = read_deepspeed(str(path))
    check_batch_fields(settings, micro_batch=2, accumulation=2, world=4)
    with pytest.raises(
        ConfigError,
        match=r"train_batch_size 16 .* = 2 x 2 x 3 = 12 \(or use a train_batch_size divisible by "
        r"per_device_train_batch_size x world size \(2 x 3\)\)",
    ):
        check_batch_fields(settings, micro_batch=2, accumulation=2, world=3)
    with pytest.raises(
        ConfigError, match=r"\(or use gradient_accumulation_steps: 4\)\. Set each of these fields to \"auto\""
    ):
        check_batch_fields(settings, micro_batch=2, accumulation=1, world=2)
    path.write_text(json.dumps({**LLAMAFACTORY_Z3, "train_micro_batch_size_per_gpu": 8}))
    with pytest.raises(
        ConfigError,
        match=r"in 1 place\(s\): \(1\) train_micro_batch_size_per_gpu is 8 but per_device_train_batch_size is 2\.",
    ):
        check_batch_fields(read_deepspeed(str(path)), micro_batch=2, accumulation=1, world=2)
    total16 = tmp_path / "ds16.json"
    total16.write_text(json.dumps({**LLAMAFACTORY_Z3, "train_batch_size": 16}))
    cfg = _cfg(deepspeed=str(total16), per_device_train_batch_size=2, gradient_accumulation_steps=2)
    distributed.check_divisibility(cfg, 4)
    with pytest.raises(ConfigError, match="train_batch_size 16"):
        distributed.check_divisibility(cfg, 3)


OPTIMIZER_BLOCKS = {
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "total_num_steps": "auto",
        },
    },
}


def test_every_field_contradicting_an_option_is_listed(tmp_path):
    from tunekit.train.engines.deepspeed_config import option_conflicts

    path = tmp_path / "ds.json"
    blocks = json.loads(json.dumps(OPTIMIZER_BLOCKS))
    blocks["optimizer"]["params"].update(lr=5e-4, betas=[0.9, 0.95])
    blocks["scheduler"]["params"]["warmup_max_lr"] = 5e-4
    path.write_text(json.dumps({**LLAMAFACTORY_Z3, **blocks, "bf16": {"enabled": True}, "train_batch_size": 6}))
    cfg = _cfg(deepspeed=str(path), learning_rate=1e-3, per_device_train_batch_size=2, use_adam_mini=True)
    assert option_conflicts(read_deepspeed(str(path)), cfg, world=2) == [
        "train_batch_size 6 is not per_device_train_batch_size x gradient_accumulation_steps x world size = 2 x 1 x 2 "
        "= 4 "
        "(or use a train_batch_size divisible by per_device_train_batch_size x world size (2 x 2))",
        "optimizer.params.lr is 0.0005 but learning_rate is 0.001",
        "optimizer.params.betas is [0.9, 0.95] but adam_beta1, adam_beta2 is [0.9, 0.999]",
        "scheduler.params.warmup_max_lr is 0.0005 but learning_rate is 0.001",
        "bf16.enabled is true but bf16 is false",
        "its optimizer block would run instead of use_adam_mini (remove the block to use use_adam_mini)",
    ]
    auto = tmp_path / "auto.json"
    auto.write_text(json.dumps({**LLAMAFACTORY_Z3, **OPTIMIZER_BLOCKS}))
    assert option_conflicts(read_deepspeed(str(auto)), _cfg(deepspeed=str(auto), bf16=True, fp16=False), world=3) == []


def test_an_autotp_size_the_process_count_cannot_split_is_a_conflict(tmp_path):
    """LLaMA-Factory's ds_z2_autotp_config.json (autotp_size 2) run as one process failed after the model loaded
    ("Mesh should not be bigger than default world size 1")."""
    from tunekit.train.engines.deepspeed_config import option_conflicts

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**LLAMAFACTORY_Z3, "tensor_parallel": {"autotp_size": 2}}))
    message = (
        "tensor_parallel.autotp_size is 2 but the run has {} process(es): AutoTP splits each layer over 2 ranks "
        "(set NPROC_PER_NODE to a multiple of 2, or remove the tensor_parallel block)"
    )
    for world in (1, 3):
        assert option_conflicts(read_deepspeed(str(path)), _cfg(deepspeed=str(path)), world=world) == [
            message.format(world)
        ]
    assert option_conflicts(read_deepspeed(str(path)), _cfg(deepspeed=str(path)), world=4) == []


def test_custom_optimizer_options_are_the_ones_tunekit_builds():
    from types import SimpleNamespace

    from tunekit.train.engines.deepspeed_config import CUSTOM_OPTIMIZERS
    from tunekit.train.optimizers import uses_custom_optimizer

    assert all(uses_custom_optimizer(SimpleNamespace(**{name: True})) for name in CUSTOM_OPTIMIZERS)
    assert not uses_custom_optimizer(SimpleNamespace(**dict.fromkeys(CUSTOM_OPTIMIZERS, False)))


def test_optimizer_and_scheduler_blocks_are_said_at_start_and_noted_in_the_saved_config(tmp_path, monkeypatch, capsys):
    from tunekit.config.loader import save_config

    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "FORCE_TORCHRUN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**LLAMAFACTORY_Z3, **OPTIMIZER_BLOCKS}))
    cfg = _cfg(deepspeed=str(path), learning_rate=1e-3, output_dir=str(tmp_path / "out"))
    optimizer = (
        f"not used: the optimizer block of {path} runs DeepSpeed's AdamW (lr=0.001, betas=[0.9, 0.999], "
        "eps=1e-08, weight_decay=0.0) as the optimizer"
    )
    schedule = (
        f"not used: the scheduler block of {path} runs DeepSpeed's WarmupDecayLR (warmup_min_lr=0, "
        "warmup_max_lr=0.001, warmup_num_steps=the run's warm-up steps, total_num_steps=the run's steps) as the "
        "learning-rate schedule"
    )
    distributed.training_args_kwargs(cfg, tmp_path / "out")
    assert capsys.readouterr().out.splitlines() == [
        f"deepspeed: optim: adamw_torch_fused is {optimizer}",
        f"deepspeed: lr_scheduler_type: linear is {schedule}",
    ]
    saved = save_config(cfg, tmp_path / "out", notes=distributed.option_notes(cfg))
    text = saved.read_text()
    assert (
        f"# {optimizer}\noptim: adamw_torch_fused\n" in text and f"# {schedule}\nlr_scheduler_type: linear\n" in text
    )
    assert load_config(saved, []) == cfg  # the notes are comments: the file still reloads as the same run
    assert distributed.option_notes(_cfg(deepspeed="z3")) == {}  # presets leave optimizer and schedule to the options


def test_missing_deepspeed_package_is_a_clear_message():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'deepspeed': raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from importlib.util import find_spec\n"
        "from tunekit.train.engines.deepspeed_config import read_deepspeed, require_deepspeed\n"
        "try:\n"
        "    require_deepspeed(read_deepspeed('z2'), on_gpu=True)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (
        "EnvironmentProblem deepspeed: z2 needs the DeepSpeed package, which is not installed: pip install "
        "'tunekit[deepspeed]'" in out.stdout
    ), out


# ------------------------------------------------------------------ FSDP2
def test_fsdp_options_map_to_fsdp2_settings():
    full = distributed.fsdp_settings(_cfg(fsdp="full_shard offload", bf16=True))
    assert full == distributed.FSDPSettings(
        "full_shard", reshard_after_forward=True, offload=True, mixed_precision="bf16"
    )
    grad = distributed.fsdp_settings(_cfg(fsdp="shard_grad_op"))
    assert (grad.reshard_after_forward, grad.offload, grad.mixed_precision, grad.wrap_classes) == (
        False,
        False,
        None,
        (),
    )
    assert distributed.fsdp_settings(_cfg(fsdp="no_shard")) is None  # DDP
    assert distributed.fsdp_settings(_cfg(fsdp="full_shard auto_wrap")).strategy == "full_shard"  # HF's spelling
    with pytest.raises(ConfigError, match="unknown word"):
        distributed._fsdp_strategy(_cfg(fsdp="full_shard hybrid"))
    with pytest.raises(ConfigError, match="exactly one of"):
        distributed._fsdp_strategy(_cfg(fsdp="full_shard shard_grad_op"))


def test_fsdp_config_file_overrides_and_unknown_keys_are_errors(tmp_path):
    path = tmp_path / "fsdp.json"
    path.write_text(
        json.dumps(
            {
                "fsdp_transformer_layer_cls_to_wrap": ["Qwen2DecoderLayer"],
                "reshard_after_forward": False,
                "cpu_offload": True,
                "version": 2,
            }
        )
    )
    settings = distributed.fsdp_settings(_cfg(fsdp="full_shard", fsdp_config=str(path)))
    assert (settings.wrap_classes, settings.reshard_after_forward, settings.offload) == (
        ("Qwen2DecoderLayer",),
        False,
        True,
    )
    path.write_text(json.dumps({"fsdp_state_dict_type": "SHARDED_STATE_DICT"}))
    with pytest.raises(
        ConfigError, match=r"key\(s\) tunekit does not use: state_dict_type\. tunekit applies FSDP2 itself"
    ):
        distributed.fsdp_settings(_cfg(fsdp="full_shard", fsdp_config=str(path)))
    path.write_text(json.dumps({"activation_checkpointing": True}))
    with pytest.raises(ConfigError, match="gradient_checkpointing: true instead"):
        distributed.fsdp_settings(_cfg(fsdp="full_shard", fsdp_config=str(path)))


def test_fsdp_combinations_it_cannot_run_are_errors_before_launch():
    with pytest.raises(ConfigError, match="not supported for stage rm"):
        distributed.fsdp_settings(_cfg(fsdp="full_shard", stage="rm"))
    with pytest.raises(ConfigError, match="fsdp with fp16 is not supported.*Use bf16"):
        distributed.fsdp_settings(_cfg(fsdp="full_shard", fp16=True))
    with pytest.raises(ConfigError, match="do_predict with fsdp"):
        distributed.fsdp_settings(_cfg(fsdp="shard_grad_op", do_predict=True))
    assert distributed.fsdp_settings(_cfg(fsdp="no_shard", stage="rm")) is None  # no_shard is DDP: no restriction


def test_fsdp_needs_no_training_arguments_on_cpu_or_gpu(monkeypatch):
    """FSDP2 is applied by tunekit, not by accelerate: the Trainer gets the DDP kwargs (on CPU: gloo)."""
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "FORCE_TORCHRUN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    kwargs = distributed.training_args_kwargs(_cfg(fsdp="full_shard offload"), "o")
    assert "fsdp" not in kwargs and "fsdp_config" not in kwargs
    assert kwargs == distributed.training_args_kwargs(_cfg(), "o")


def test_fsdp_shards_decoder_layers_and_root_and_gathers_a_full_state_dict(tiny_qwen):
    """One rank (world size 1, gloo) in this process: the units, accelerate's marker, and the gathered state dict."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule
    from transformers import AutoModelForCausalLM

    from tunekit.train.engines import fsdp

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    settings = distributed.FSDPSettings("full_shard", reshard_after_forward=True, offload=False)
    with pytest.raises(ConfigError, match="needs torch.distributed"):
        fsdp.shard(model, settings, torch.device("cpu"))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        fsdp.shard(model, settings, torch.device("cpu"))
        units = {type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule)}
        assert units == {"FSDPQwen2DecoderLayer", "FSDPQwen2ForCausalLM"}
        assert fsdp.is_sharded(model) and model._is_accelerate_prepared  # accelerate will not wrap it in DDP
        state = fsdp.full_state_dict(model)
        assert state["lm_head.weight"] is state["model.embed_tokens.weight"]  # tied: one tensor, saved once
        assert all(torch.equal(state[k], expected[k]) for k in expected)
    finally:
        dist.destroy_process_group()


def test_fsdp_lora_reference_forward_keeps_the_adapter_trainable(tiny_qwen):
    """DPO/KTO's LoRA reference is the policy under ``disable_adapter()`` (a no-grad forward that toggles
    requires_grad). With shard_grad_op the layers would stay gathered after it and PEFT would re-enable only the
    gathered copies: the sharded LoRA weights, which FSDP2 copies requires_grad from, would stay frozen."""
    import torch
    import torch.distributed as dist
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tunekit.train.engines import fsdp

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_qwen), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    )
    settings = distributed.FSDPSettings("shard_grad_op", reshard_after_forward=False, offload=False)
    ids = torch.tensor([[3, 17, 42, 99, 256, 7]])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        fsdp.shard(model, settings, torch.device("cpu"))
        with torch.no_grad(), model.disable_adapter():
            model(input_ids=ids)
        fsdp.reshard(model)  # what create_optimizer does first
        lora = [p for n, p in model.named_parameters() if "lora_" in n]
        assert lora and all(p.requires_grad for p in lora)
        assert model(input_ids=ids, labels=ids).loss.requires_grad
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------ kwargs, roles, planner
def test_single_process_kwargs_change_nothing_but_timeout(monkeypatch):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "FORCE_TORCHRUN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert distributed.training_args_kwargs(_cfg(ddp_timeout=99), "o") == {
        "ddp_timeout": 99,
        "ddp_find_unused_parameters": None,
    }
    assert distributed.is_main_process() and distributed.world_size() == 1
    assert distributed.maybe_relaunch(["model_name_or_path=m", "output_dir=o"], _cfg()) is None


def test_roles_follow_launcher_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert not distributed.is_main_process() and not distributed.is_local_main_process()
    assert distributed.world_size() == 4
    assert distributed.maybe_relaunch(["model_name_or_path=m"], _cfg()) is None


def test_engine_plan_for_the_planner(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "0")
    assert distributed.engine_plan(_cfg(deepspeed="z3_offload")) == distributed.EnginePlan(
        "deepspeed", 8, 3, True, True
    )
    assert distributed.engine_plan(_cfg(fsdp="shard_grad_op")) == distributed.EnginePlan("fsdp", 8, 2, False, False)
    assert distributed.engine_plan(_cfg(fsdp="full_shard offload")) == distributed.EnginePlan("fsdp", 8, 3, True, True)
    assert distributed.engine_plan(_cfg(fsdp="no_shard")) == distributed.EnginePlan("ddp", 8)
    assert distributed.engine_plan(_cfg()) == distributed.EnginePlan("ddp", 8)


def test_deepspeed_launcher_local_rank_argument_is_ignored(capsys):
    from tunekit.cli.main import main

    assert main(["--local_rank=1", "-V"]) == 0  # `deepspeed $(which tunekit) train ...` puts it before the verb
    assert capsys.readouterr().out.startswith("tunekit ")


# ------------------------------------------------------------------ stages on several ranks, resume across world sizes
def test_rollout_sampler_gives_each_rank_its_own_prompts_for_every_reuse_of_a_rollout():
    """ppo/grpo reuse a rollout for ``reuse`` optimizer steps: after accelerate deals the batches out to the ranks,
    each rank must see the same micro-batches on those steps, and the ranks different prompts."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    from tunekit.train.stages.rollout import RepeatSampler

    n, per_device, accumulation, world, reuse = 10, 2, 2, 2, 3
    sampler = RepeatSampler(n, per_device * accumulation * world, reuse, seed=0)
    ranks = [
        list(BatchSamplerShard(BatchSampler(sampler, per_device, drop_last=False), world, rank))
        for rank in range(world)
    ]
    steps = [[batches[i : i + accumulation] for i in range(0, len(batches), accumulation)] for batches in ranks]
    assert (
        len(steps[0]) == len(steps[1]) == 2 * reuse
    )  # 10 prompts -> 2 rollouts of 8 (the last filled up), 3 steps each
    seen = set()
    for rollout in range(0, 2 * reuse, reuse):
        for rank_steps in steps:
            assert all(rank_steps[rollout + k] == rank_steps[rollout] for k in range(reuse))
        prompts = [sorted(i for batch in rank_steps[rollout] for i in batch) for rank_steps in steps]
        assert not set(prompts[0]) & set(prompts[1]) and len(set(prompts[0])) == per_device * accumulation
        seen.update(*prompts)
    assert seen == set(range(n))


def test_resume_refuses_a_zero_checkpoint_of_another_world_size_or_another_engine(tmp_path, monkeypatch):
    from tunekit.train.resume import check_resume_setup, zero_world_size

    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    zero = tmp_path / "checkpoint-2"
    (zero / "global_step2").mkdir(parents=True)
    (zero / "latest").write_text("global_step2")
    for name in (
        "mp_rank_00_model_states.pt",
        "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ):
        (zero / "global_step2" / name).write_bytes(b"")
    ddp = tmp_path / "checkpoint-4"
    ddp.mkdir()
    (ddp / "optimizer.pt").write_bytes(b"")
    assert (zero_world_size(zero), zero_world_size(ddp)) == (2, None)
    with pytest.raises(
        ConfigError, match=r"written by 2 processes, and this run has 1 process: .* Resume with 2 processes"
    ):
        check_resume_setup(zero, deepspeed=True)
    with pytest.raises(ConfigError, match="written without DeepSpeed"):
        check_resume_setup(ddp, deepspeed=True)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    check_resume_setup(zero, deepspeed=True)  # the world size that wrote it
    check_resume_setup(ddp, deepspeed=False)  # DDP checkpoints: any world size
    with pytest.raises(
        ConfigError, match="written by DeepSpeed .* this run has no deepspeed: transformers would restart"
    ):
        check_resume_setup(zero, deepspeed=False)


def test_a_long_silent_step_says_what_it_is_doing(monkeypatch):
    import threading

    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    lines, said = [], threading.Event()

    def out(line):
        lines.append(line)
        said.set()

    with distributed.saying("starting the process group (waiting for every rank)", every_s=0.01, out=out):
        assert said.wait(60)  # the block lasts until the first notice: no sleep of a guessed length
    count = len(lines)
    assert lines[0].startswith("tunekit: still starting the process group (waiting for every rank), ")
    assert lines[0].endswith(" s so far")
    monkeypatch.setenv("RANK", "1")
    with distributed.saying("x", every_s=0.0, out=out):
        pass
    assert len(lines) == count  # only the main process speaks


def _stop_flag_rank(rank: int, store_path: str, out: str) -> None:
    import torch.distributed as dist

    from tunekit.train.callbacks import any_rank

    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    try:
        seen = [any_rank(rank == 1, "cpu"), any_rank(False, "cpu")]  # a signal reached rank 1 only; then nobody's
        Path(out, str(rank)).write_text(json.dumps(seen))
    finally:
        dist.destroy_process_group()


def test_a_stop_requested_on_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    """GracefulStopCallback: ranks that got SIGTERM either side of a step boundary used to stop after different
    steps and wait for each other in the checkpoint's collectives until torchrun killed them."""
    import torch.multiprocessing as mp

    mp.start_processes(_stop_flag_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, start_method="spawn")
    assert [json.loads((tmp_path / r).read_text()) for r in ("0", "1")] == [[True, False], [True, False]]
