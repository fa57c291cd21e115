"""Units, one definition each: bytes per GiB and MiB.

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

