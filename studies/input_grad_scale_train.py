"""Train configs/experiments/input_grad_scale.yaml in stages: the ×1/×5 contrast on both seeds
first, with both untied references, then the PIT run of §12's trace, ×10 and ×2.

`tying experiment` would train the same cells seed-major; this driver only changes the order (so
that a run cut short by time leaves the most useful cells finished). Rerunning it skips the
finished cells and resumes a killed one. Analysis: studies/input_grad_scale.py.

    PYTHONPATH=src nice -n 19 python -m studies.input_grad_scale_train
"""

from tying.experiment import run_grid
from tying.experiment.config import load_experiment

CONFIG = "configs/experiments/input_grad_scale.yaml"
STAGES = [
    (["untied", "tt", "tt-x5"], [0]),
    (["tt", "tt-x5"], [1]),
    (["untied"], [1]),
    (["pit"], [0]),
    (["tt-x10"], [0, 1]),
    (["tt-x2"], [0, 1]),
    (["pit"], [1]),
]


def main() -> None:
    """Train the grid's cells stage by stage (STAGES), skipping the finished ones."""
    for names, seeds in STAGES:
        cfg = load_experiment(CONFIG)
        cfg.variants = {k: cfg.variants[k] for k in names}
        cfg.seeds = seeds
        print("stage", names, seeds, flush=True)
        run_grid(cfg, progress=False)
    print("all trained", flush=True)


if __name__ == "__main__":
    main()
