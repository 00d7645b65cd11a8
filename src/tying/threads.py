"""Thread control for small dense factorizations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def single_threaded() -> Iterator[None]:
    """One thread for torch and for the BLAS/LAPACK underneath, restored afterwards.

    For d×d factorizations (eigh, svdvals) and memory-bound iterations (ARPACK):
    threads cost more in synchronization than they gain there, and on a busy
    machine spinning BLAS threads made a 256×256 `eigvalsh` take seconds instead
    of milliseconds. The BLAS limit uses `threadpoolctl` (skipped when missing).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            yield
        else:
            with threadpool_limits(limits=1, user_api="blas"):
                yield
    finally:
        torch.set_num_threads(threads)
