"""The probe: every view of a model's token interface, composed from `tying.analysis`.

    from tying.probe import ProbeOptions, run_probe
    result = run_probe(ProbeOptions("smollm2", against="runs/x"), "out/probe")
    result.report["consistency"]["raw"]["delta_ti"]

- `matrices`: E, U, the final-norm gain g and the embedding multiplier s of a loaded model.
- `views`: the single-model blocks (consistency, params, spectra, norm_frequency, drift).
- `compare`: vocabulary matching and the two-model blocks (alignment, KNN overlap, spectral
  distance), one KNN search per matrix shared by both neighbour metrics.
- `corpus`: token counts of a text corpus (capped); `checkpoints`: a run's checkpoints.
- `runner`: `run_probe` writes probe.json, probe.md, probe.html and the PNG plots; `report`:
  probe.md and probe.html (one `tying.report.Document`);
  `plots`: the figures; `stages`: stage timings and progress lines (through `logging`).

Every metric is defined in docs/metrics.md (the layout of probe.json too).
"""

from tying.probe.matrices import InterfaceMatrices, interface_matrices, model_info
from tying.probe.runner import BLOCKS, ProbeOptions, ProbeResult, parse_skip, run_probe
from tying.probe.stages import Stages, stderr_log

__all__ = [
    "BLOCKS",
    "InterfaceMatrices",
    "ProbeOptions",
    "ProbeResult",
    "Stages",
    "interface_matrices",
    "model_info",
    "parse_skip",
    "run_probe",
    "stderr_log",
]
