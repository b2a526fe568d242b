"""Data: dataset_info registry → file readers → format converters (alpaca / sharegpt / openai →
one canonical conversation) → templates (render + mask) → per-stage processors → collators.

Entry point for training: :func:`tunekit.data.pipeline.prepare_datasets`.
"""
