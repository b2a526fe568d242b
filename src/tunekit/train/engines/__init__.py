"""The parallel engines: the launcher (torchrun / multi-node), DDP and DeepSpeed set-up, FSDP2."""
