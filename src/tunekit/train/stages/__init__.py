"""The training stages (pt, sft, rm, ppo, dpo, kto, grpo): one module each, named in config/stages.py,
plus what several of them share (the stage trainer base, the reference policy, the value head, rollouts)."""
