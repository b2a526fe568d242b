"""Turn formats that a text template and its vision-language sibling share (registry.py, vlm_specs.py).

Each dict holds the ``TemplateSpec`` fields the family's templates have in common, so their strings have one
home; a spec spreads it (``**GEMMA_TURNS``) and states what differs (its trimming, tools, default system).
"""

from __future__ import annotations

#: Vicuna v1.1's 'USER: ... ASSISTANT:' turns (FastChat), also the llava-hf LLaVA-1.5 / LLaVA-NeXT format
VICUNA_TURNS = dict(
    prefix="{bos}",
    auto_bos=True,
    bos="<s>",
    system="{content} ",
    user="USER: {content} ASSISTANT:",
    header=" ASSISTANT:",
    assistant=" {content}{eos}",
)

LLAMA3_HEADER = "<|start_header_id|>assistant<|end_header_id|>\n\n"

#: Llama 3's header-token turns ending in <|eot_id|> (Llama 3 instruct, LLaVA-NeXT on Llama 3)
LLAMA3_TURNS = dict(
    prefix="{bos}",
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    system="<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
    user="<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>" + LLAMA3_HEADER,
    header=LLAMA3_HEADER,
    assistant="{content}<|eot_id|>",
    replace_eos=True,
    document_end="<|end_of_text|>",
)

#: Gemma's <start_of_turn> turns, the system glued to the first user turn (Gemma 2, Gemma 3); which roles
#: are trimmed differs (``trim``: gemma trims user messages, gemma3 leaves that to its media plugin)
GEMMA_TURNS = dict(
    prefix="{bos}",
    bos="<bos>",
    eos="<eos>",
    system="{content}\n\n",
    system_in="first_user",
    user="<start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n",
    header="<start_of_turn>model\n",
    assistant="{content}<end_of_turn>",
    observation="<start_of_turn>tool\n{content}<end_of_turn>\n<start_of_turn>model\n",
    sep="\n",
    stop_words=("<end_of_turn>",),
    replace_eos=True,
    document_end="<eos>",
)
