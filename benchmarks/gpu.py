"""Benchmark: every GPU measurement of the project in one run, written to one JSON.

Sections, in order (each is timed; one that fails records its error and the run goes on; the
JSON is rewritten after each, so a run cut by its time limit keeps what it measured):

- `machine`: GPU, driver, Python, torch, Triton, transformers; the bf16 matrix peak
  (8192³ products on random data, median of 10) and the device-to-device copy bandwidth
  (bytes read + written), both measured here: every MFU below is over THIS peak.
- `flash`: whether SDPA's flash kernel runs our attention shape (bf16, causal, GQA with
  `enable_gqa`), and its time against SDPA's default choice.
- `steps`: one optimizer step of the `small` preset (d 768, 16 layers, V 50,257) as `tying
  train` takes it, `tying.train.loop.train_step` itself on a run built as `tying train` builds
  one (`benchmarks/steps.py`): `--step-tokens` tokens (default 131,072, the issue's run) in
  micro-batches of 16 (or 32, "micro2x") × 1,024 tokens, each checked and copied from the host
  (pinned, non-blocking), forward and backward under bf16 autocast, then clipping, the step's
  one host sync and the run's AdamW groups (fused on CUDA; PIT's Z retracted after the step by
  the hook `tying train` attaches). Variants, in order of
  importance (none starts after `--steps-budget-s`): the comparison the issue asks for first
  (our Decoder TT compiled; transformers' LlamaForCausalLM of the same shape, tied, compiled;
  PIT compiled, trainable Z as in scratch mode, T^{-1} applied by a product on the GPU; our TT
  eager; untied compiled; TT at the larger micro-batch, which `train` then uses if faster),
  then the alternatives that explain it (Llama at the larger micro-batch; Llama eager; PIT at
  the larger micro-batch; TT compiled with the parallel block's five input projections fused
  into one product, the default before `ParallelBlock._fuses_projections` refused it under
  compile; PIT with T^{-1} by triangular solves as on the CPU, "solves"; TT with 1 GiB chunks
  of logits in the chunked cross-entropy). Compiling a variant costs 25-53 s on an H100 or
  H200, so the defaults (`--steps-budget-s 190`, `--budget-s 420`) time the first six (about
  235 s on the H100) and leave time for every other section: about 7 minutes in all. Per variant: median step time (CUDA events), tokens/s, MFU = (6·N + 12·L·T·d)·tokens /
  time / peak (N = parameters in matrix products, the head once;
  `benchmarks/train_throughput.py`), peak memory, the losses of every step; for TT, PIT and
  Llama compiled a kernel profile of one step (time per kernel family, the longest kernels,
  kernel time over wall time). Eager and compiled TT start from the same weights and read the
  same batches: their losses must agree step for step (compiled = eager).
- `train`: `tying train preset=small` (seq 1,024, `--step-tokens` tokens/step in the
  micro-batch `steps` found faster, compile and precision auto) on Gutenberg text for
  `--train-steps` steps: the median tokens/s of the steps after the fifth (compilation) and its
  MFU; then `tying probe` and `tying lens --kind logit` on that run (exit status, seconds).
- `lens`: the logit lens of a SmolLM2-135M-shaped model (random weights: d 576, 30 layers,
  V 49,152) on 8 × 1,024 tokens in bf16, against its floor, the (L + 1) bf16 head products
  alone, measured side by side.
- `generation`: batched greedy generation (`tying.evaluation.generate.greedy_generate`)
  against transformers' `generate` on that model: time and identical tokens.

Usage (on a machine with a GPU; `--quick` runs tiny shapes, also on the CPU, to test the
script):
    python benchmarks/gpu.py [--out benchmarks/results/gpu.json] [--budget-s 420] [--quick]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from steps import project_step, train_config  # noqa: E402
from train_throughput import hf_llama, step_flops  # noqa: E402

#: SmolLM2-135M's shape (the lens and generation sections use it with random weights).
SMOLLM2_SHAPE = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: torch.device, reps: int) -> list[float]:
    """Seconds of `reps` calls of `fn`, each bracketed by synchronisation (CUDA events on GPU)."""
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times


# ---------------------------------------------------------------------------- machine
def machine(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "device": str(device),
    }
    for name in ("transformers", "triton", "peft"):
        try:
            info[name] = __import__(name).__version__
        except Exception as error:  # recorded, not fatal
            info[name] = f"unavailable ({type(error).__name__})"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            multiprocessors=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
    n = 1024 if args.quick else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b, out=out)
    t = statistics.median(_timed(lambda: torch.mm(a, b, out=out), device, 10))
    info["matmul_peak_bf16_flops"] = 2 * n**3 / t
    src = torch.empty(2**28 if not args.quick else 2**22, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = statistics.median(_timed(lambda: dst.copy_(src), device, 10))
    info["copy_bytes_per_s"] = 2 * src.numel() / t
    return info


# ---------------------------------------------------------------------------- flash
def flash(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, K, T, D = (2, 4, 1, 64, 64) if args.quick else (16, 12, 3, 1024, 64)
    q = torch.randn(B, H, T, D, device=device, dtype=torch.bfloat16)
    k = torch.randn(B, K, T, D, device=device, dtype=torch.bfloat16)
    v = torch.randn(B, K, T, D, device=device, dtype=torch.bfloat16)

    def default() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    result: dict[str, Any] = {"shape": [B, H, K, T, D]}
    reference = default()
    result["default_s"] = statistics.median(_timed(default, device, 10))
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            got = default()
            result["flash_s"] = statistics.median(_timed(default, device, 10))
        result["flash_runs"] = True
        result["flash_vs_default_max_abs_diff"] = float((got - reference).abs().max())
    except RuntimeError as error:
        result["flash_runs"] = False
        result["flash_error"] = str(error).splitlines()[0]
    return result


# ---------------------------------------------------------------------------- steps
def _batches(vocab: int, batch: int, seq: int, n: int) -> list[tuple]:
    """`n` host micro-batches (inputs, targets) of (batch, seq) ids: the step copies them."""
    g = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        out.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
    return out


def _run_config(preset: str, tie: str, seq: int, compiled: bool) -> Any:
    """The `TrainConfig` of a timed variant: bf16, compiled or eager; PIT's Z trained (scratch)."""
    return train_config(
        [
            f"preset={preset}",
            f"tie={tie}",
            f"seq_len={seq}",
            "precision=bf16",
            f"compile={str(compiled).lower()}",
        ]
    )


def _step_fn(
    model: torch.nn.Module, cfg: Any, hf: bool, batches: list[tuple], n_micro: int, device
) -> Callable[[], Any]:
    """One optimizer step of `model` as `tying train` takes it: `tying.train.loop.train_step`
    on `n_micro` of `batches` (in turn), the run's optimizers and hooks (`benchmarks/steps.py`);
    a transformers model computes its own loss. Returns step() -> its `StepOutcome`."""
    forward = (lambda x, _y: model(input_ids=x, labels=x).loss) if hf else None
    return project_step(model, cfg, batches, accum=n_micro, device=device, forward=forward)


#: Kernel families of a CUDA profile, by a pattern of the kernel's name (first match wins).
KERNEL_FAMILIES = (
    ("attention", ("flash", "fmha", "cudnn", "attention", "sdpa")),
    ("matmul", ("gemm", "cutlass", "nvjet", "sm90_", "sm100_", "cublas", "trsm", "gemv")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel")),
    ("compiled (Triton)", ("triton",)),
    ("eager elementwise/reduction", ("elementwise", "reduce", "vectorized", "unrolled")),
    ("copies", ("memcpy", "memset", "copy")),
)


def _kernel_profile(step: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """Where one optimizer step's GPU time goes: kernel time per family (`KERNEL_FAMILIES`),
    the 15 longest kernels, and the kernels' total against the step's wall time (CUDA only)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return {"skipped": "no CUDA device"}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        wall = time.perf_counter() - t0
    per_kernel: dict[str, list[float]] = {}  # name -> [seconds, calls]
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            entry = per_kernel.setdefault(e.name, [0.0, 0])
            entry[0] += e.time_range.elapsed_us() / 1e6
            entry[1] += 1
    families: dict[str, float] = {}
    for name, (seconds, _) in per_kernel.items():
        low = name.lower()
        family = next((f for f, keys in KERNEL_FAMILIES if any(k in low for k in keys)), "other")
        families[family] = families.get(family, 0.0) + seconds
    busy = sum(families.values())
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1][0])[:15]
    return {
        "wall_s_profiled": wall,
        "kernel_s_total": busy,
        "kernel_over_wall": busy / wall,
        "families_s": dict(sorted(families.items(), key=lambda kv: -kv[1])),
        "top_kernels": [{"name": k[:120], "s": v[0], "calls": v[1]} for k, v in top],
    }


def steps(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    preset = "tiny" if args.quick else "small"
    seq = 64 if args.quick else 1024
    base_micro = 2 if args.quick else 16
    step_tokens = 4 * seq * base_micro if args.quick else args.step_tokens
    vocab = 50257
    warmup, reps = (2, 3) if args.quick else (2, args.reps)
    from tying.decoder import preset_config
    from tying.train.build import build_model

    section_t0 = time.perf_counter()
    saved: dict[str, Any] = {}
    # the model shape of the TT run (the one `build_model` gives it), for the FLOPs and Llama
    cfg = preset_config(preset, vocab_size=vocab, tie="tt", max_seq_len=max(seq, 1024))
    flops = step_flops(cfg, step_tokens, seq)
    # name: (model, its TrainConfig, transformers?, micro-batch factor, profile?, module
    # attributes set for this variant only: {"module:attribute": value}); in order of
    # importance (the section stops starting variants after --steps-budget-s).
    Variant = tuple[torch.nn.Module, Any, bool, int, bool, dict[str, Any]]
    big_chunks = {"tying.interface.loss:_DEFAULT_LOGIT_BYTES_PER_CHUNK": 1 << 30}
    pit_solves = {"tying.interface.pit:solves_by_inverse": lambda device: False}

    def ours(
        tie: str,
        compiled: bool = True,
        factor: int = 1,
        profiled: bool = False,
        patches: dict[str, Any] | None = None,
    ) -> Callable[[], Variant]:
        def make() -> Variant:
            run = _run_config(preset, tie, seq, compiled)
            return build_model(run, vocab), run, False, factor, profiled, patches or {}

        return make

    def llama(compiled: bool = True, factor: int = 1, profiled: bool = False):
        # the TT run's settings: its optimizer groups, clipping, precision, compilation
        return lambda: (
            hf_llama(cfg),
            _run_config(preset, "tt", seq, compiled),
            True,
            factor,
            profiled,
            {},
        )

    # The parallel block's five input projections as one product under compile too (the
    # default before 2026-11-26, when `ParallelBlock._fuses_projections` began to refuse it
    # under compile): measures that change.
    fused_compiled = {
        "tying.decoder.block:ParallelBlock._fuses_projections": lambda self, device: (
            device.type == "cuda" and self._projections_fusable()
        )
    }
    variants: dict[str, Callable[[], Variant]] = {
        "ours_tt_compiled": ours("tt", profiled=True),
        "hf_llama_compiled": llama(profiled=True),
        "ours_pit_compiled": ours("pit", profiled=True),
        "ours_tt_eager": ours("tt", compiled=False),
        "ours_untied_compiled": ours("untied"),
        "ours_tt_compiled_micro2x": ours("tt", factor=2),
        "hf_llama_compiled_micro2x": llama(factor=2),
        "hf_llama_eager": llama(compiled=False),
        "ours_pit_compiled_micro2x": ours("pit", factor=2),
        "ours_tt_compiled_fused_projections": ours("tt", patches=fused_compiled),
        "ours_pit_compiled_solves": ours("pit", patches=pit_solves),
        "ours_tt_compiled_chunk1g": ours("tt", patches=big_chunks),
    }
    out: dict[str, Any] = {
        "preset": preset,
        "tokens_per_step": step_tokens,
        "seq_len": seq,
        "micro_batch": base_micro,
        "step_flops": flops,
        "variants": {},
    }
    for name, make in variants.items():
        if time.perf_counter() - section_t0 > args.steps_budget_s:
            out["variants"][name] = {"skipped": "time budget"}
            continue
        try:
            torch.manual_seed(0)
            model, run_cfg, hf, factor, profiled, patches = make()
            for key, value in patches.items():
                saved[key] = _set_attribute(key, value)
            micro = base_micro * factor
            n_micro = step_tokens // (micro * seq)
            # two steps' micro-batches, taken in turn
            data = _batches(vocab, micro, seq, 2 * n_micro)
            step = _step_fn(model, run_cfg, hf, data, n_micro, device)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            losses: list[float] = []
            t0 = time.perf_counter()
            for _ in range(warmup):
                losses.append(step().loss)
            warm_s = time.perf_counter() - t0
            times = []
            for _ in range(reps):
                box: list[Any] = []
                times += _timed(lambda box=box, fn=step: box.append(fn()), device, 1)
                losses.append(box[0].loss)
            med = statistics.median(times)
            entry = {
                "micro_batch": micro,
                "micro_batches_per_step": n_micro,
                "step_s_median": med,
                "step_s_all": times,
                "warmup_s": warm_s,
                "tokens_per_s": step_tokens / med,
                "losses": losses,
            }
            if device.type == "cuda":
                entry["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            if profiled:
                entry["profile"] = _kernel_profile(step, device)
            out["variants"][name] = entry
            print(
                f"  {name}: {med * 1e3:.1f} ms/step, {step_tokens / med:,.0f} tokens/s", flush=True
            )
            del model, step
        except Exception as error:
            out["variants"][name] = {"error": repr(error), "traceback": traceback.format_exc()}
            print(f"  {name}: FAILED {error!r}", flush=True)
        finally:
            for key, value in saved.items():
                _set_attribute(key, value)
            saved.clear()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _set_attribute(key: str, value: Any) -> Any:
    """Set "module:attribute" or "module:Class.attribute" to `value`; returns the old value."""
    module, path = key.split(":")
    *parents, attribute = path.split(".")
    owner: Any = importlib.import_module(module)
    for name in parents:
        owner = getattr(owner, name)
    old = owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
    setattr(owner, attribute, value)
    return old


#: The vendor's dense bf16 tensor-core peak (no 2:4 sparsity), FLOP/s, by GPU name: MFU is
#: quoted against it (`mfu_spec`) beside the matmul peak measured in the same run (`mfu`).
SPEC_PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12}
SPEC_PEAK_SOURCE = (
    "NVIDIA H100 and H200 datasheets (SXM): 989 TFLOP/s dense BF16 tensor core "
    "(1,979 with sparsity)"
)


def spec_peak(gpu: str | None) -> float | None:
    """The spec peak of `SPEC_PEAK_BF16_FLOPS` for a device name such as "NVIDIA H200", or
    None for a GPU not listed (and for the H100 PCIe, whose peak is lower)."""
    if not gpu or "PCIe" in gpu:
        return None
    return next((v for k, v in SPEC_PEAK_BF16_FLOPS.items() if k in gpu), None)


def add_mfu_spec(result: dict[str, Any]) -> None:
    """Beside every `mfu` (against the measured matmul peak) of a gpu.py result, `mfu_spec`:
    the same FLOP rate over the vendor's dense bf16 peak, mfu × measured / spec. Records the
    spec value and its source in `machine`. Nothing happens for a GPU without a spec entry."""
    m = result.get("machine", {})
    measured, spec = m.get("matmul_peak_bf16_flops"), spec_peak(m.get("gpu"))
    if not measured or not spec:
        return
    m["spec_peak_bf16_flops"] = spec
    m["spec_peak_source"] = SPEC_PEAK_SOURCE
    m["measured_over_spec_peak"] = measured / spec
    scale = measured / spec
    for entry in result.get("steps", {}).get("variants", {}).values():
        if "mfu" in entry:
            entry["mfu_spec"] = entry["mfu"] * scale
    summary = result.get("steps", {}).get("summary", {})
    if summary.get("ours_best_mfu") is not None:
        summary["ours_best_mfu_spec"] = summary["ours_best_mfu"] * scale
    if "mfu" in result.get("train", {}):
        result["train"]["mfu_spec"] = result["train"]["mfu"] * scale


def _step_summary(section: dict[str, Any], peak: float) -> dict[str, Any]:
    """MFU per variant and the ratios the issue names."""
    v = section["variants"]
    ok = {k: e for k, e in v.items() if "step_s_median" in e}
    for entry in ok.values():
        entry["mfu"] = section["step_flops"] / entry["step_s_median"] / peak
    summary: dict[str, Any] = {}

    def ratio(a: str, b: str) -> float | None:
        return ok[a]["step_s_median"] / ok[b]["step_s_median"] if a in ok and b in ok else None

    for suffix in ("", "_micro2x"):
        summary[f"ours_compiled_over_hf_compiled_tokens_per_s{suffix}"] = ratio(
            f"hf_llama_compiled{suffix}", f"ours_tt_compiled{suffix}"
        )
        summary[f"pit_over_tt_step_time_compiled{suffix}"] = ratio(
            f"ours_pit_compiled{suffix}", f"ours_tt_compiled{suffix}"
        )
    best = {  # the faster micro-batch of each, default settings only
        who: min(
            (
                ok[k]["step_s_median"]
                for k in (f"{who}_compiled", f"{who}_compiled_micro2x")
                if k in ok
            ),
            default=None,
        )
        for who in ("ours_tt", "hf_llama")
    }
    if best["ours_tt"] and best["hf_llama"]:
        summary["ours_best_over_hf_best_tokens_per_s"] = best["hf_llama"] / best["ours_tt"]
        summary["ours_best_mfu"] = section["step_flops"] / best["ours_tt"] / peak
    summary["pit_solves_over_pit_step_time_compiled"] = ratio(
        "ours_pit_compiled_solves", "ours_pit_compiled"
    )
    summary["chunk1g_over_default_step_time_compiled"] = ratio(
        "ours_tt_compiled_chunk1g", "ours_tt_compiled"
    )
    summary["untied_over_tt_step_time_compiled"] = ratio("ours_untied_compiled", "ours_tt_compiled")
    summary["fused_projections_over_default_step_time_compiled"] = ratio(
        "ours_tt_compiled_fused_projections", "ours_tt_compiled"
    )
    summary["compiled_over_eager_speedup_ours"] = ratio("ours_tt_eager", "ours_tt_compiled")
    if "ours_tt_eager" in ok and "ours_tt_compiled" in ok:
        a, b = ok["ours_tt_eager"]["losses"], ok["ours_tt_compiled"]["losses"]
        n = min(len(a), len(b), 8)
        summary["compiled_vs_eager_max_abs_loss_diff_first_steps"] = max(
            abs(x - y) for x, y in zip(a[:n], b[:n], strict=True)
        )
        summary["compiled_loss_moves"] = b[n - 1] < b[0] - 1e-3
    return summary


# ---------------------------------------------------------------------------- train
def _cli(argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tying", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        rc, tail = done.returncode, (done.stdout + done.stderr)[-1500:]
    except subprocess.TimeoutExpired as error:
        rc, tail = 124, str(error)[-500:]
    return {"argv": argv, "rc": rc, "seconds": time.perf_counter() - t0, "output_tail": tail}


def train(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    run = Path(args.work) / "train-small"
    seq, micro = (64, 2) if args.quick else (1024, 16)
    step_tokens = 4 * seq * micro if args.quick else args.step_tokens
    variants = args.results.get("steps", {}).get("variants", {})
    timed = {
        e["micro_batch"]: e["step_s_median"]
        for k, e in variants.items()
        if k.startswith("ours_tt_compiled") and "step_s_median" in e
    }
    if timed:  # the micro-batch that `steps` found faster
        micro = min(timed, key=timed.__getitem__)
    argv = [
        "train",
        f"preset={'tiny' if args.quick else 'small'}",
        "tie=tt",
        f"seq_len={seq}",
        f"micro_batch_size={micro}",
        f"global_batch_tokens={step_tokens}",
        f"max_steps={args.train_steps}",
        "eval_every=0",
        f"eval_tokens={seq * micro}",
        "checkpoint_every=0",
        "max_documents=24",
        "warmup_steps=5",
        "progress=false",
        "tensorboard=false",
        f"out={run}",
    ]
    env = dict(os.environ)
    result: dict[str, Any] = {"train": _cli(argv, env, timeout=args.budget_s * 0.4)}
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > 5]
        if rates:
            result["micro_batch_size"] = micro
            result["global_batch_tokens"] = step_tokens
            result["tokens_per_s_median_after_step_5"] = statistics.median(rates)
            result["steps_measured"] = len(rates)
        result["final_loss"] = next((r["loss"] for r in reversed(rows) if "loss" in r), None)
    if result["train"]["rc"] == 0:
        budget = max(120.0, args.budget_s - (time.perf_counter() - args.t0) - 120)
        result["probe"] = _cli(["probe", str(run), "--out", str(run / "probe")], env, budget / 2)
        result["lens"] = _cli(
            [
                "lens",
                str(run),
                "--kind",
                "logit",
                "--max-tokens",
                "4096",
                "--out",
                str(run / "lens"),
            ],
            env,
            budget / 2,
        )
    return result


# ---------------------------------------------------------------------------- lens + generation
def _smollm2_shaped(device: torch.device, quick: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    from tying.loader import wrap_model

    shape = dict(SMOLLM2_SHAPE)
    if quick:
        shape.update(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2)
        shape.update(num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    config = LlamaConfig(
        **shape,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    loaded = wrap_model(LlamaForCausalLM(config).eval(), name="smollm2-shaped (random)")
    loaded.model.to(device)
    return loaded


def lens(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from tying.lens import LogitLens, evaluate_lens
    from tying.lens.head import LensHead

    lm = _smollm2_shaped(device, args.quick)
    V, d, entries = lm.vocab_size, lm.d_model, lm.n_entries
    g = torch.Generator().manual_seed(0)
    n_batches, seq = (2, 64) if args.quick else (8, 1024)
    batches = [torch.randint(0, V, (1, seq), generator=g) for _ in range(n_batches)]
    n = n_batches * seq
    head = LensHead.of(lm, "bf16")
    chunk = 1024
    h = torch.randn(chunk, d, device=device).bfloat16()
    buf = torch.empty(chunk, V, dtype=torch.bfloat16, device=device)
    weight = head.weight.to(device)

    def floor() -> None:
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            for _ in range(entries):
                torch.mm(h[:rows], weight.t(), out=buf[:rows])

    kls: dict[str, list[float]] = {}

    def lens_run(precision: str) -> Callable[[], None]:
        def run() -> None:
            kls[precision] = evaluate_lens(
                lm, LogitLens(), batches, precision=precision, device=device
            ).kl

        return run

    t0 = time.perf_counter()
    for fn in (floor, lens_run("bf16"), lens_run("fp32")):  # warm-up (compiles the row kernels)
        fn()
    _sync(device)
    warm = time.perf_counter() - t0
    times = {
        name: statistics.median(_timed(fn, device, 3))
        for name, fn in (
            ("head_matmul_bf16", floor),
            ("logit_lens_bf16", lens_run("bf16")),
            ("logit_lens_fp32", lens_run("fp32")),
        )
    }
    return {
        "model": "SmolLM2-135M shape, random weights",
        "tokens": n,
        "entries": entries,
        "warmup_s": warm,
        "time_s": times,
        "ratio_lens_over_head_matmul_bf16": times["logit_lens_bf16"] / times["head_matmul_bf16"],
        "max_abs_kl_diff_bf16_vs_fp32_bits": max(
            abs(a - b) for a, b in zip(kls["bf16"], kls["fp32"], strict=True)
        ),
    }


def generation(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from tying.evaluation.generate import greedy_generate

    lm = _smollm2_shaped(device, args.quick)
    model = lm.model.hf_model if hasattr(lm.model, "hf_model") else lm.model
    V = model.config.vocab_size
    batch, prompt, new = (2, 16, 8) if args.quick else (8, 128, 128)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, V, (batch, prompt), generator=g).to(device)
    mask = torch.ones_like(ids)

    def hf() -> torch.Tensor:
        return model.generate(
            ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=2
        )

    def ours() -> torch.Tensor:
        return greedy_generate(model, ids, mask, max_new_tokens=new, eos_token_id=2, pad_token_id=2)

    with torch.no_grad():
        reference, mine = hf(), ours()
        times = {
            "generate": statistics.median(_timed(hf, device, 3)),
            "ours": statistics.median(_timed(ours, device, 3)),
        }
    return {
        "model": "SmolLM2-135M shape, random weights, float32",
        "batch": batch,
        "prompt_tokens": prompt,
        "new_tokens": int(reference.shape[1] - prompt),
        "identical_tokens": bool(torch.equal(reference, mine)),
        "time_s": times,
        "ratio_generate_over_ours": times["generate"] / times["ours"],
    }


SECTIONS: dict[str, Callable[[argparse.Namespace, torch.device], dict[str, Any]]] = {
    "machine": machine,
    "flash": flash,
    "steps": steps,
    "train": train,
    "lens": lens,
    "generation": generation,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu.json"))
    parser.add_argument("--work", default="/tmp/tying-gpu-bench", help="run folders go here")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no section after")
    parser.add_argument("--reps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument(
        "--steps-budget-s", type=float, default=190.0, help="`steps` starts no variant after this"
    )
    parser.add_argument(
        "--step-tokens",
        type=int,
        default=131072,
        help="tokens per optimizer step of `steps` and `train` (the issue's run: 131,072)",
    )
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="tiny shapes (tests the script)")
    args = parser.parse_args()
    args.t0 = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 stays fp32, as in `tying train`
    result: dict[str, Any] = {
        "benchmark": "GPU: training steps, tying train, logit lens, generation",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "quick": args.quick,
    }
    args.results = result
    out = Path(args.out)
    for name in [s for s in args.sections.split(",") if s]:
        elapsed = time.perf_counter() - args.t0
        if elapsed > args.budget_s:
            result[name] = {"skipped": f"time budget ({elapsed:.0f} s)"}
            continue
        print(f"[{elapsed:6.1f} s] {name}", flush=True)
        t0 = time.perf_counter()
        try:
            result[name] = SECTIONS[name](args, device)
        except Exception as error:
            result[name] = {"error": repr(error), "traceback": traceback.format_exc()}
            print(f"  FAILED: {error!r}", flush=True)
        result[name]["section_s"] = time.perf_counter() - t0
        if name == "steps" and "machine" in result and "variants" in result["steps"]:
            peak = result["machine"].get("matmul_peak_bf16_flops")
            if peak:
                result["steps"]["summary"] = _step_summary(result["steps"], peak)
        if name == "train" and "tokens_per_s_median_after_step_5" in result[name]:
            peak = result.get("machine", {}).get("matmul_peak_bf16_flops")
            steps_section = result.get("steps", {})
            if peak and "step_flops" in steps_section:
                rate = result[name]["tokens_per_s_median_after_step_5"]
                per_token = steps_section["step_flops"] / steps_section["tokens_per_step"]
                result[name]["mfu"] = rate * per_token / peak
        add_mfu_spec(result)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    result["total_s"] = time.perf_counter() - args.t0
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(_table(result), flush=True)
    print(f"wrote {out}")


def _table(result: dict[str, Any]) -> str:
    """The short summary printed last."""
    lines = []
    m = result.get("machine", {})
    if "matmul_peak_bf16_flops" in m:
        lines.append(
            f"{m.get('gpu', m.get('device'))}: bf16 peak {m['matmul_peak_bf16_flops'] / 1e12:.0f} TFLOP/s"
            f" measured, {m.get('spec_peak_bf16_flops', float('nan')) / 1e12:.0f} spec"
        )
    for name, e in result.get("steps", {}).get("variants", {}).items():
        if "step_s_median" in e:
            lines.append(
                f"{name:22s} {e['step_s_median'] * 1e3:7.1f} ms {e['tokens_per_s']:>10,.0f} tok/s "
                f"MFU {e.get('mfu', float('nan')):.1%} (spec {e.get('mfu_spec', float('nan')):.1%})"
            )
        else:
            lines.append(f"{name:22s} {e.get('skipped') or e.get('error', '')[:80]}")
    lines.append(f"summary: {json.dumps(result.get('steps', {}).get('summary', {}))}")
    t = result.get("train", {})
    lines.append(
        f"tying train: {t.get('tokens_per_s_median_after_step_5')} tok/s, MFU {t.get('mfu')}; "
        f"rc train {t.get('train', {}).get('rc')} probe {t.get('probe', {}).get('rc')} "
        f"lens {t.get('lens', {}).get('rc')}"
    )
    for key in ("lens", "generation"):
        e = result.get(key, {})
        lines.append(
            f"{key}: "
            + json.dumps(
                {
                    k: v
                    for k, v in e.items()
                    if "ratio" in k or k == "identical_tokens" or k == "error"
                }
            )
        )
    lines.append(f"total {result.get('total_s', 0):.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
