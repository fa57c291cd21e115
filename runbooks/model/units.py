"""Units, one definition each: bytes per GiB and MiB, and a ratio shown as a percent.

`GIB` and `MIB` are ints, so byte counts built from them stay exact ints; to get GiB as a
float, divide (`/` is true division in Python 3 and gives the same float as dividing by
`float(GIB)`); `//` gives whole units.

>>> GIB, MIB
(1073741824, 1048576)
>>> 81920 * MIB == 80 * GIB  # nvidia-smi's MiB to bytes, and back to whole GiB
True
>>> 76903612416 / GIB, 76903612416 // GIB
(71.6220703125, 71)
"""

from __future__ import annotations

#: bytes in one GiB (2^30), as nvidia-smi, the engines and Kubernetes "Gi" count them
GIB = 1 << 30
#: bytes in one MiB (2^20)
MIB = 1 << 20


def pct(ratio: float | None) -> float | None:
    """A ratio (0..1) as a percent rounded to one decimal, as the catalogs show it; None stays None.

    >>> pct(0.983), pct(0.2075), pct(1), pct(None)
    (98.3, 20.8, 100, None)
    """
    return None if ratio is None else round(ratio * 100, 1)
