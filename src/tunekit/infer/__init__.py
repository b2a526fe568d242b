"""Inference: one render -> generate -> stream path (:class:`tunekit.infer.engine.ChatEngine`) shared by
``tunekit chat``, ``tunekit api``, ``tunekit predict`` and the web board's Chat tab."""
