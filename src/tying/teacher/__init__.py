"""Teacher mode: turning pretrained models into token-interface models and back.

- `conversion`: `tying convert` (a model SPEC -> a converted folder) and `tying export`
  (a converted folder or teacher-mode run -> a plain transformers checkpoint);
- `step0`: what a conversion does to the teacher before any training (loss, KL).
"""
