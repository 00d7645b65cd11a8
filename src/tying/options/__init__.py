"""The schema layer: every verb's options dataclass, importable without torch.

`tying VERB --help` and every configuration error (unknown key, wrong type, unknown choice)
need only these dataclasses, so they answer before torch or transformers is imported. The
modules that run a verb re-export its options from here (one schema); checks that need torch
(a model, a tokenizer, a device) run when the verb runs. Nothing here imports torch,
transformers or another `tying` package except `tying.config` and `tying.errors` (tested);
`FitOptions.uses_autocast` imports `tying.devices` when a fit runs.
"""
