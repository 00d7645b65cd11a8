"""`tying probe SPEC [--against SPEC2] [--corpus PATH] --out DIR`: every view of a token interface.

Writes DIR/probe.json (the numbers; layout in docs/metrics.md, "probe.json"), DIR/probe.md
(tables with units, plots linked) and PNG plots. SPEC is a training run or checkpoint folder,
"smollm2", a .gguf file, a transformers folder or a hub id. Stage timings go to stderr.
Exit status: 0, 1 when a block failed (its {"error": ...} is in probe.json), 2 for bad
arguments or a model that does not load.
"""

from __future__ import annotations

import argparse
import sys

HELP = "interface consistency, parameters, norms vs frequency, drift; --against: alignment, KNN, spectral"

_DTYPES = ("float32", "bfloat16", "float16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec",
        metavar="SPEC",
        help="run or checkpoint folder, 'smollm2', a .gguf file, a model folder or a hub id",
    )
    parser.add_argument("--out", required=True, help="output folder (probe.json, probe.md, PNGs)")
    parser.add_argument(
        "--against",
        default=None,
        metavar="SPEC2",
        help="a second model: alignment, KNN overlap and spectral distance of the interfaces",
    )
    parser.add_argument(
        "--corpus",
        default=None,
        help="text for token frequencies (file, folder, glob, hf:NAME; default: Gutenberg "
        "validation books)",
    )
    parser.add_argument(
        "--corpus-tokens",
        type=int,
        default=200_000,
        help="tokens counted from the corpus (default 200000; 0 = all)",
    )
    parser.add_argument(
        "--min-count", type=int, default=1, help="norm_frequency: minimum token count (1)"
    )
    parser.add_argument("--k", type=int, default=10, help="neighbours of the KNN@k overlap (10)")
    parser.add_argument(
        "--spectral-k", type=int, default=64, help="neighbours of the spectral kNN graphs (64)"
    )
    parser.add_argument(
        "--n-components", type=int, default=128, help="omnibus embedding components (128)"
    )
    parser.add_argument(
        "--maps",
        choices=("raw", "effective"),
        default="raw",
        help="matrices compared with --against: stored E, U (raw) or s·E, U·diag(g) (effective)",
    )
    parser.add_argument(
        "--pairs",
        choices=("all", "cross"),
        default="all",
        help="pairs of A/B input/output matrices compared: all six, or only A vs B (cross)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="BLOCK[,BLOCK]",
        help="leave out blocks: consistency, params, spectra, norm_frequency (norms), drift, "
        "alignment, knn_overlap (knn), spectral_distance (spectral), plots",
    )
    parser.add_argument(
        "--tokenizer", default=None, help="override SPEC's tokenizer (a load_tokenizer spec)"
    )
    parser.add_argument("--against-tokenizer", default=None, help="override SPEC2's tokenizer")
    parser.add_argument(
        "--load-dtype",
        choices=_DTYPES,
        default="float32",
        help="dtype the weights are loaded in; every metric runs in float32/float64 (float32)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: torch's choice, one per core; 1 can be faster on a "
        "machine busy with other jobs)",
    )
    parser.add_argument("--quiet", action="store_true", help="no stage lines on stderr")


def _error(message: str) -> int:
    print(f"tying probe: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    import torch

    from tying.probe import ProbeOptions, run_probe, stderr_log
    from tying.probe.stages import quiet_log

    if args.threads is not None:
        if args.threads < 1:
            return _error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.corpus_tokens < 0:
        return _error(f"--corpus-tokens must be >= 0 (0 = all), got {args.corpus_tokens}")
    try:
        options = ProbeOptions(
            spec=args.spec,
            against=args.against,
            corpus=args.corpus,
            corpus_tokens=args.corpus_tokens or None,
            min_count=args.min_count,
            k=args.k,
            spectral_k=args.spectral_k,
            n_components=args.n_components,
            maps=args.maps,
            pairs=args.pairs,
            skip=frozenset(args.skip),
            tokenizer=args.tokenizer,
            against_tokenizer=args.against_tokenizer,
            dtype=getattr(torch, args.load_dtype),
        )
    except ValueError as err:
        return _error(str(err))
    log = quiet_log if args.quiet else stderr_log()
    try:
        result = run_probe(options, args.out, log)
    except (FileNotFoundError, ValueError, OSError) as err:
        return _error(str(err))
    timings = result.report["timings_s"]
    print(
        f"wrote {result.json_path}, {result.markdown_path} and {len(result.plots)} plot(s) "
        f"in {timings['total']:.1f} s"
    )
    if result.errors:
        print(
            f"tying probe: {len(result.errors)} block(s) failed: {', '.join(result.errors)} "
            "(see probe.json)",
            file=sys.stderr,
        )
        return 1
    return 0
