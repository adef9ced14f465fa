"""numpy's BLAS held to one thread while heads draft beside llama.cpp.

OpenBLAS's worker threads spin for a while after each multithreaded call; on a machine
whose cores llama.cpp's threads already use, a head's matmul every step left them
spinning into the next target decode and made it 2.8x slower (a 4-row verify of the
135M model: 25 ms -> 70 ms). One thread runs a head's matmul in the caller instead.
"""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path

import numpy as np

SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
           "scipy_openblas_set_num_threads")


def _blas_libraries() -> list[str]:
    """Loaded shared libraries that are an OpenBLAS (numpy's, once it has done a matmul)."""
    np.dot(np.ones((2, 2)), np.ones((2, 2)))  # numpy loads its BLAS lazily on some builds
    found: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "openblas" in Path(path).name.lower() and path not in found:
                found.append(path)
    return found


def limit_blas_threads(n: int = 1) -> bool:
    """Run numpy's BLAS on `n` threads from now on; False where no OpenBLAS was found."""
    done = False
    for path in _blas_libraries():
        with contextlib.suppress(OSError):
            lib = ctypes.CDLL(path)
            for name in SETTERS:
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.argtypes = [ctypes.c_int]
                    fn(n)
                    done = True
                    break
    return done
