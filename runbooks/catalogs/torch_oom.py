"""PyTorch's CUDA out-of-memory message, piece by piece and by torch version.

Every engine re-raises torch's OOM, so its wording is torch's, not the engine's. The message is
assembled from literal pieces in `c10/cuda/CUDACachingAllocator.cpp` (the default allocator,
`DeviceCachingAllocator::malloc`) and `c10/cuda/CUDAMallocAsyncAllocator.cpp` (the
`backend:cudaMallocAsync` allocator, a multi-line block); the exception's Python name is set in
`torch/csrc/Exceptions.cpp`. Read in the compiled libraries of the PyPI wheels (cp311,
manylinux x86_64): the strings of `torch/lib/libc10_cuda.so` for 1.13.0, 2.0.0, 2.1.0, 2.1.2 and
every minor release 2.2.0-2.15.0, and of `torch/lib/libtorch_python.so` for 1.13.0 and 2.0.0-2.5.0
and 2.15.0; the 2.x source at pytorch@001074d for the order the pieces print in.

The rules of `runbooks.catalogs.engine_logs` hold: a "since" of the oldest version read (1.13.0)
means at least since then, a first version between two read releases is the newer of the two,
and `until` None means the newest read (2.15.0) still prints it. Before 1.13 torch raised a plain
RuntimeError with the caching allocator's older form; the "CUDA out of memory" words are the same.

`collectors.parsers.log_failures` takes its patterns from this table and nothing else;
`tests/test_torch_oom.py` renders the whole message at every version read from these pieces and
reads it back field by field.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbooks.catalogs.versions import Version, within

#: the torch releases whose libraries were read
READ: tuple[Version, ...] = ((1, 13, 0), (2, 0, 0), (2, 1, 0), (2, 1, 2), *((2, m, 0) for m in range(2, 16)))

#: a size as torch's format_size prints it ("448.00 KiB", "17179869184.00 GiB", "512 bytes")
SIZE = r"(?<![\d.])(\d{1,12}(?:\.\d{1,6})?)\s*(GiB|MiB|KiB|GB|MB|KB|bytes|B)\b"

_CACHING = "c10/cuda/CUDACachingAllocator.cpp (libc10_cuda.so)"
_ASYNC = "c10/cuda/CUDAMallocAsyncAllocator.cpp (libc10_cuda.so)"
_EXC = "torch/csrc/Exceptions.cpp (libtorch_python.so)"


@dataclass(frozen=True)
class OomPiece:
    """One figure (or marker) of the OOM message. `field`: the `CudaOom` field its size fills
    (None: a marker, read for no figure; a name starting with `_` is an intermediate that
    `oom_numbers` turns into a field); `literal`: the piece as the library holds it (what to search
    for); `pattern`: what reads it, the size in groups 1 and 2; `form`: which message it belongs
    to ("old": the caching allocator to 2.0, "new": the caching allocator from 2.1, "async": the
    cudaMallocAsync block, "name": the exception's name); `render`: the piece with `{size}` (and
    `{n}`, a number) as it prints, for the rendered test corpus."""

    id: str
    field: str | None
    literal: str
    pattern: str
    form: str
    since: Version
    until: Version | None
    source: str
    render: str

    def printed_by(self, version: Version) -> bool:
        return within(version, self.since, self.until)


_OLDEST = READ[0]

PIECES: tuple[OomPiece, ...] = (
    # ------------------------------------------------------------------ the exception's name
    OomPiece("name.cuda", None, "torch.cuda.OutOfMemoryError", r"\btorch\.cuda\.OutOfMemoryError\b", "name",
             _OLDEST, (2, 3, 0), _EXC, "torch.cuda.OutOfMemoryError: "),
    OomPiece("name.torch", None, "torch.OutOfMemoryError", r"\btorch\.OutOfMemoryError\b", "name",
             (2, 4, 0), None, _EXC, "torch.OutOfMemoryError: "),
    # ------------------------------------------------------------------ both caching forms
    OomPiece("tried", "tried_bytes", "CUDA out of memory. Tried to allocate ", r"Tried to allocate " + SIZE,
             "caching", _OLDEST, None, _CACHING, "CUDA out of memory. Tried to allocate {size}"),
    # ------------------------------------------------------------------ to 2.0: "(GPU 0; X total capacity; ...)"
    OomPiece("old.total", "total_bytes", " total capacity; ", SIZE + r" total capacity", "old",
             _OLDEST, (2, 0, 0), _CACHING, " (GPU {n}; {size} total capacity; "),
    OomPiece("old.allocated", "allocated_bytes", " already allocated; ", SIZE + r" already allocated", "old",
             _OLDEST, (2, 0, 0), _CACHING, "{size} already allocated; "),
    OomPiece("old.free", "free_bytes", " free; ", SIZE + r" free[;)]", "old",
             _OLDEST, (2, 0, 0), _CACHING, "{size} free; "),
    OomPiece("old.allowed", "allowed_bytes", " allowed; ", SIZE + r" allowed;", "old",
             _OLDEST, (2, 0, 0), _CACHING, "{size} allowed; "),
    OomPiece("old.reserved", "_reserved_total", " reserved in total by PyTorch)",
             SIZE + r" reserved in total by PyTorch", "old", _OLDEST, (2, 0, 0), _CACHING,
             "{size} reserved in total by PyTorch) If reserved memory is >> allocated memory try setting "
             "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
             "PYTORCH_CUDA_ALLOC_CONF"),
    # ------------------------------------------------------------------ from 2.1: "GPU 0 has a total capacity of X of which Y is free."
    OomPiece("new.total_misspelt", "total_bytes", " has a total capacty of ", r"total capacty of " + SIZE, "new",
             (2, 1, 0), (2, 1, 2), _CACHING, ". GPU {n} has a total capacty of {size}"),
    OomPiece("new.total", "total_bytes", " has a total capacity of ", r"total capacity of " + SIZE, "new",
             (2, 2, 0), None, _CACHING, ". GPU {n} has a total capacity of {size}"),
    OomPiece("new.free", "free_bytes", " is free. ", r"of which " + SIZE + r" (?:is )?free", "new",
             (2, 1, 0), None, _CACHING, " of which {size} is free. "),
    OomPiece("new.other_process", "_other_process", "Process ", r"[Pp]rocess \d{1,10} has " + SIZE + r" memory in use",
             "new", (2, 1, 0), None, _CACHING, "Process {n} has {size} memory in use. "),
    OomPiece("new.this_process", "this_process_bytes", "Including non-PyTorch memory, this process",
             r"this process has " + SIZE + r" memory in use", "new", (2, 1, 0), None, _CACHING,
             "Including non-PyTorch memory, this process has {size} memory in use. "),
    OomPiece("new.allowed", "allowed_bytes", " allowed; ", SIZE + r" allowed;", "new",
             (2, 1, 0), None, _CACHING, "{size} allowed; "),
    OomPiece("new.allocated", "allocated_bytes", " is allocated by PyTorch, ", SIZE + r" is allocated by PyTorch",
             "new", (2, 1, 0), None, _CACHING, "Of the allocated memory {size} is allocated by PyTorch, "),
    OomPiece("new.private_pools", "private_pools_bytes", " allocated in private pools (e.g., CUDA Graphs), ",
             r"with " + SIZE + r" allocated in private pools", "new", (2, 4, 0), None, _CACHING,
             "with {size} allocated in private pools (e.g., CUDA Graphs), "),
    OomPiece("new.unallocated", "reserved_unallocated_bytes", " is reserved by PyTorch but unallocated.",
             SIZE + r" is reserved by PyTorch but unallocated", "new", (2, 1, 0), None, _CACHING,
             "and {size} is reserved by PyTorch but unallocated."),
    OomPiece("new.hint_split", None, "max_split_size_mb to avoid", r"max_split_size_mb to avoid", "new",
             (2, 1, 0), (2, 1, 2), _CACHING,
             " If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  "
             "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"),
    OomPiece("new.hint_expandable", None, "expandable_segments:True to avoid", r"expandable_segments:True to avoid",
             "new", (2, 2, 0), None, _CACHING,
             " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
             "expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
             "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
    # ------------------------------------------------------------------ backend:cudaMallocAsync, from 2.0, one figure per line
    OomPiece("async.head", None, " would exceed allowed memory. (out of memory)",
             r"would exceed allowed memory", "async", (2, 0, 0), None, _ASYNC,
             "Allocation on device {n} would exceed allowed memory. (out of memory)"),
    OomPiece("async.allocated", "allocated_bytes", "Currently allocated     : ", r"Currently allocated\s*: " + SIZE,
             "async", (2, 0, 0), None, _ASYNC, "\nCurrently allocated     : {size}"),
    OomPiece("async.requested", "tried_bytes", "Requested               : ", r"Requested\s*: " + SIZE,
             "async", (2, 0, 0), None, _ASYNC, "\nRequested               : {size}"),
    OomPiece("async.limit", "total_bytes", "Device limit            : ", r"Device limit\s*: " + SIZE,
             "async", (2, 0, 0), None, _ASYNC, "\nDevice limit            : {size}"),
    OomPiece("async.free", "free_bytes", "Free (according to CUDA): ", r"Free \(according to CUDA\)\s*: " + SIZE,
             "async", (2, 0, 0), None, _ASYNC, "\nFree (according to CUDA): {size}"),
    OomPiece("async.allowed", "allowed_bytes", "PyTorch limit (set by user-supplied memory fraction)",
             r"PyTorch limit \(set by user-supplied memory fraction\)\s*: " + SIZE, "async", (2, 0, 0), None, _ASYNC,
             "\nPyTorch limit (set by user-supplied memory fraction)\n                        : {size}"),
)

BY_ID = {p.id: p for p in PIECES}

#: the pieces that carry a figure, in the order `oom_numbers` tries them (first match per field)
FIGURES: tuple[OomPiece, ...] = tuple(p for p in PIECES if p.field is not None)

#: words that close a message; without one it may wrap onto the next line (the
#: cudaMallocAsync block has none: its "PyTorch limit" lines follow "Free (according to CUDA)"
#: where a fraction was set, so the block is read for as long as its lines last)
ENDS = ("PYTORCH_CUDA_ALLOC_CONF", "Memory Management", "reserved by PyTorch but unallocated",
        "reserved in total by PyTorch")


def render(version: Version, form: str, sizes: dict[str, str], n: int = 0) -> str:
    """The message `version` prints in `form` ("caching" or "async"), its figures from
    `sizes` (piece id -> "1.25 GiB"); pieces without a size in `sizes` that need one are left out
    (as torch leaves out "allowed" without a fraction and "private pools" when they are empty)."""
    name = next(p for p in PIECES if p.form == "name" and p.printed_by(version))
    parts = [name.render]
    forms = ("caching", "old") if version < (2, 1, 0) else ("caching", "new")
    for p in PIECES:
        if p.form == "name" or not p.printed_by(version):
            continue
        if form == "async" and p.form != "async":
            continue
        if form == "caching" and p.form not in forms:
            continue
        if "{size}" in p.render and p.id not in sizes:
            continue
        parts.append(p.render.format(size=sizes.get(p.id, ""), n=n))
    return "".join(parts)
