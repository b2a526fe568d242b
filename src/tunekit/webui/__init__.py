"""``tunekit webui``: the web board (Gradio). Import :func:`create_app` / :func:`launch` from
:mod:`tunekit.webui.app`; the logic without widgets is :class:`tunekit.webui.board.Board`."""
