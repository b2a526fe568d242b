"""Command-line entry point (``tunekit``). Help paths import neither torch nor transformers."""
