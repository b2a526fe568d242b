"""Model: load tokenizer/config/weights (dtype, attention, RoPE scaling, quantization) and apply the method (LoRA,
freeze, full)."""
