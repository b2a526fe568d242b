"""An OpenAI-compatible HTTP API (``tunekit api``) over :class:`tunekit.infer.engine.ChatEngine`."""
