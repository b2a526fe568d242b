"""Training: one module per stage on top of shared trainer plumbing (callbacks, checkpoints, launch)."""
