"""Counter-based randomness for generators: every value a pure function of its key, so a
generated row is the same whatever the chunking or the size of the output."""
from __future__ import annotations

import numpy as np


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays or scalars (wrapping modulo 2^64)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
