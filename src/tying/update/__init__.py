"""Post-training updates: LoRA fine-tuning of any model the project loads (`tying finetune`).

Modules: `data` (training examples of MBPP, GSM8K or a JSONL file; tokenization with the prompt
masked; a seeded, resumable order), `lora` (peft's LoRA on the model, the token interface frozen
or, with train_interface, trained off its manifold tensors), `tokens` (`add_tokens`: new
vocabulary entries, `tying add-tokens`), `finetune` (`FinetuneOptions`,
`finetune`: the update as a run of `tying.train.loop`, the adapter folder). Adapter files and the record of
the base model live in `tying.adapters`; docs/updates.md describes all of it.
"""

from tying.update.finetune import FinetuneOptions, FinetuneResult, finetune
from tying.update.tokens import AddTokensOptions, AddTokensResult, add_tokens

__all__ = [
    "AddTokensOptions",
    "AddTokensResult",
    "FinetuneOptions",
    "FinetuneResult",
    "add_tokens",
    "finetune",
]
