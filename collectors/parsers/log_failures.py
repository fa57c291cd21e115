"""Why an engine failed, read from its log: CUDA OOMs with their numbers and phase, and the
parallel-layout errors the engines print.

A CUDA OOM message is evidence, not a keyword: torch prints how much was asked for, the
card's capacity, what was free, what the failing process held, what PyTorch had allocated and
what it had reserved but not used (fragmentation). Every torch wording of 1.13-2.15 is read, as
`runbooks.catalogs.torch_oom` holds them by version: from 2.1 "GPU 0 has a total capacity of X
GiB of which Y MiB is free. Process N has Z GiB memory in use. Of the allocated memory A GiB is
allocated by PyTorch, and R MiB is reserved by PyTorch but unallocated" (2.1.x spells it
"capacty"; from 2.4 "with P allocated in private pools (e.g., CUDA Graphs)"), to 2.0 "(GPU 0; X
total capacity; A GiB already allocated; F MiB free; ...; R GiB reserved in total by PyTorch)",
and the `backend:cudaMallocAsync` allocator's block from 2.0 ("Currently allocated : X GiB ...
Device limit : Y GiB"; TGI's warm-up prints it where that backend is set).

The phase comes from the traceback and the lines around the OOM: the latest phase marker
before it (a start-up log line, a traceback frame such as `load_weights` or
`_dummy_sampler_run`, a serving line), or, when nothing before it says (a log listed newest
first), the first marker within a few lines after it. No marker, no phase: nothing is called
"at run time" by default.

>>> r = FailureReader()
>>> r.feed("INFO 05-10 12:00:01 model_runner.py:1] Capturing cudagraphs for decoding.")
>>> r.feed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. "
...        "GPU 0 has a total capacity of 44.53 GiB of which 448.00 KiB is free.")
>>> oom = r.oom()
>>> oom.phase, round(oom.total_bytes / 2**30, 2)
('cudagraph', 44.53)
"""

from __future__ import annotations

import re

from runbooks.catalogs import torch_oom
from runbooks.model.evidence import CudaOom, KvAllocFailure, ParallelError

EXAMPLE_CHARS = 300
_UNITS = {"gib": 2**30, "gb": 2**30, "mib": 2**20, "mb": 2**20, "kib": 2**10, "kb": 2**10, "bytes": 1, "b": 1}
_SIZE = torch_oom.SIZE

#: torch's figures, from the table of its message by version (runbooks.catalogs.torch_oom)
_FIELDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (p.field, re.compile(p.pattern)) for p in torch_oom.FIGURES if p.field not in ("_other_process", "this_process_bytes"))
#: torch >= 2.1 names every process on the card: "Process 25252 has 18.65 GiB memory in use. ...
#: Including non-PyTorch memory, this process has 29.47 GiB memory in use"
_THIS_PROCESS = re.compile(torch_oom.BY_ID["new.this_process"].pattern)
_OTHER_PROCESS = re.compile(torch_oom.BY_ID["new.other_process"].pattern)
_OOM = re.compile(r"CUDA out of memory|\bOutOfMemoryError\b|" + torch_oom.BY_ID["async.head"].pattern)
#: words that close torch's OOM message; without one the message may wrap onto the next line
_OOM_END = torch_oom.ENDS

#: a line of torch's multi-line allocator report ("Requested               : 1.49 MiB")
_BLOCK_LINE = re.compile(r"^\s*(?:[A-Za-z][\w ()\-]{0,60}:\s*(?:" + _SIZE + r")?\s*$|\(out of memory\)|:\s*" + _SIZE
                         + r"|PyTorch limit \(set by user-supplied memory fraction\)\s*$)")
#: lines that block may run after the OOM line
_BLOCK_LINES = 8
#: (phase, substrings that mark it), most specific first
_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sampler_warmup", ("_dummy_sampler_run", "warming up sampler")),
    ("cudagraph", ("Capturing cudagraphs", "Capturing the model for CUDA graphs", "Capturing CUDA graph",
                   "capture_model", "Capture cuda graph", "CUDA graphs can take additional", "Capturing batches",
                   "cuda_graph_runner", "cudagraph capture")),
    ("kv_cache", ("initialize_cache", "_initialize_kv_caches", "initialize_kv_cache", "_allocate_kv_cache",
                  "init_memory_pool")),
    ("profiling", ("profile_run", "determine_num_available_blocks", "determine_available_memory",
                   "Memory profiling", "profile_max_num_token")),
    ("loading", ("load_weights", "load_model", "Loading model weights", "Starting to load model",
                 "Load weight begin", "Loading safetensors checkpoint shards", "weight_utils", "model_loader",
                 "Loading weights")),
    ("warmup", ("Warming up model", "Method Warmup", "warmup{", "Unable to warmup", " in warmup")),
    ("serving", ("Avg prompt throughput", "Decode batch", "Prefill batch", "serving_chat", "serving_completion",
                 "Request failed during generation", "POST /v1", "POST /generate", "Received request",
                 "Added request", "generate_stream", "prefill{", "batch{", "Application startup complete",
                 "Uvicorn running", "Started server process")),
)
_MARKER_NEEDLES = tuple(n for _, needles in _MARKERS for n in needles)
#: lines after an OOM in which a marker still names its phase (logs listed newest first)
_LOOK_AHEAD = 8

_PARALLEL: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("heads_indivisible",
         r"Total number of attention heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)"),
        ("kv_heads_indivisible",
         r"Total number of (?:key/value|KV|kv) heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)"),
        ("layers_indivisible",
         r"layers \((\d+)\) (?:must be|is not|are not) divisible by (?:the )?pipeline parallel size \((\d+)\)"),
        ("gpus_insufficient", r"[Tt]ensor parallel size \((\d+)\) exceeds available GPUs \((\d+)\)"),
        # vLLM's world size over the node's GPUs: "Tensor parallel size (N) cannot be larger" in
        # 0.12.0 (config/parallel.py:566), "World size (N) is larger" from 0.13.0 (:1072@0.33.0)
        ("gpus_insufficient", r"World size \((\d+)\) is (?:larger|greater) than the number of available GPUs \((\d+)\)"),
        ("gpus_insufficient",
         r"[Tt]ensor parallel size \((\d+)\) cannot be larger than the number of available GPUs \((\d+)\)"),
        ("gpus_insufficient", r"()()The number of required GPUs exceeds the total number of available GPUs"),
        ("gpus_insufficient", r"()()The number of GPUs per node is not divisible by the number of tensor parallelism"),
    )
)
_PARALLEL_NEEDLES = ("divisible", "available GPUs", "number of GPUs")


def _bytes(value: str, unit: str) -> int:
    return int(float(value) * _UNITS[unit.lower()])


def oom_numbers(text: str) -> dict[str, int]:
    """The numbers an OOM message carries, by CudaOom field name (bytes).

    >>> oom_numbers("Tried to allocate 2.00 MiB (GPU 0; 22.20 GiB total capacity; 20.75 GiB already "
    ...             "allocated; 3.12 MiB free; 22.20 GiB allowed; 20.86 GiB reserved in total by PyTorch)")["free_bytes"]
    3271557
    """
    out: dict[str, int] = {}
    for name, pattern in _FIELDS:
        if name in out:
            continue
        m = pattern.search(text)
        if m:
            out[name] = _bytes(m.group(1), m.group(2))
    this = _THIS_PROCESS.search(text)
    others = [_bytes(v, u) for v, u in _OTHER_PROCESS.findall(text)]
    if this is not None:
        out["this_process_bytes"] = _bytes(this.group(1), this.group(2))
        out["in_use_bytes"] = out["this_process_bytes"]
        if others:
            out["other_processes_bytes"] = sum(others)
    elif others:  # one "Process N" alone is the failing process as its container numbers it
        out["in_use_bytes"] = others[0]
    total = out.get("total_bytes")
    if total:
        # torch prints a held figure past the card's capacity where the driver's own count is
        # wrong ("this process has 17179869184.00 GiB memory in use", seen under WSL): no figure
        # of memory on the card can exceed the card, so such a figure is not kept
        for name in _ON_THE_CARD:
            if out.get(name, 0) > total:
                del out[name]
    reserved = out.pop("_reserved_total", None)
    if reserved is not None and "allocated_bytes" in out and "reserved_unallocated_bytes" not in out:
        out["reserved_unallocated_bytes"] = max(0, reserved - out["allocated_bytes"])
    return out


def torch_form(text: str) -> str | None:
    """Which of torch's wordings an OOM message is (`runbooks.catalogs.torch_oom` forms): "old"
    (the caching allocator to 2.0), "new" (from 2.1), "async" (backend:cudaMallocAsync), or None
    where no piece of one is in it."""
    for form, pieces in _FORM_PIECES:
        if any(p.search(text) for p in pieces):
            return form
    return None


#: each form's own pieces (the "allowed" figure reads the same in both caching forms: left out)
_FORM_PIECES = tuple(
    (form, tuple(re.compile(p.pattern) for p in torch_oom.FIGURES
                 if p.form == form and sum(q.pattern == p.pattern for q in torch_oom.FIGURES) == 1))
    for form in ("new", "old", "async"))


#: figures of memory on the card, each at most its capacity (what was asked for may be more)
_ON_THE_CARD = ("free_bytes", "in_use_bytes", "this_process_bytes", "other_processes_bytes", "allocated_bytes",
                "reserved_unallocated_bytes", "_reserved_total", "allowed_bytes", "private_pools_bytes")


def parallel_error(text: str) -> ParallelError | None:
    """The parallel-layout error a line states, or None."""
    if not any(n in text for n in _PARALLEL_NEEDLES):
        return None
    for kind, pattern in _PARALLEL:
        m = pattern.search(text)
        if m is None:
            continue
        a = int(m.group(1)) if m.group(1) else None
        b = int(m.group(2)) if m.group(2) else None
        example = text.strip()[:EXAMPLE_CHARS]
        if kind == "gpus_insufficient":
            return ParallelError(kind, size=a, gpus=b, example=example)
        return ParallelError(kind, heads=a, size=b, example=example)
    return None


#: SGLang's KV-allocator refusal, as its sources print it (one f-string over three lines or
#: more; the logger's prefix only on the first). file:line of the f-string at each version read:
#: - 0.4.1-0.4.6 "Avaliable tokens: M" (SGLang's own typo): srt/managers/schedule_batch.py
#:   614-615@0.4.1 ("{Prefill|Decode} out of memory"), 781-782 (alloc), 821-823 (prefill),
#:   856-858 (decode)@0.4.5, 927-928@0.4.6
#: - 0.4.7-0.4.9 "Available tokens: M": schedule_batch.py:1042-1044@0.4.7, 1047-1048@0.4.8,
#:   956-958 (alloc), 997-1001 (prefill), 1032-1036 (decode)@0.4.9; prefill and decode then
#:   print the two pools as f-string `=` lines, "self.token_to_kv_pool_allocator.available_size()=A"
#:   and "self.tree_cache.evictable_size()=E" (schedule_batch.py:1000-1001@0.4.9, 858-859@0.4.5)
#: - 0.4.10 on "Available tokens: M (available_size=A + evictable_size=E)":
#:   schedule_batch.py:1033-1035 and 1836@0.4.10, 1051-1053 and 1844@0.5.1, 1054-1056 and
#:   1827@0.5.2; srt/mem_cache/common.py (generic "Out of memory." from 0.5.4) 218 / 286 / 412
#:   with base_prefix_cache.py:229@0.5.9; srt/mem_cache/allocation.py:163-165 (generic),
#:   239-241 (prefill), 613-615 (decode) with base_prefix_cache.py:741@0.5.23
#: - the sliding-window (SWA) pools, 0.4.10-0.5.20: "Available full tokens: F
#:   (full_available_size=A + full_evictable_size=E)" then "Available swa tokens: S
#:   (swa_available_size=A + swa_evictable_size=E)" and two "... LRU list evictable size: N"
#:   lines (schedule_batch.py:1828-1831@0.4.10, mem_cache/common.py:472-475@0.5.4,
#:   swa_radix_cache.py:813-816@0.5.9); the Mamba cache's "Available full tokens" alone
#:   (mamba_radix_cache.py:899-900@0.5.9)
#: - the unified radix cache, 0.5.11 on: "Available full tokens: F (full_available_size=A +
#:   full_evictable_size_=E)" then "Available swa: S (available_size=A +
#:   component_evictable_size_=E)" (and "Available mamba: ..." in request slots, not tokens)
#:   (unified_radix_cache.py:905-906 and 919-920@0.5.11, 3845-3846 and 3859-3860@0.5.23)
#: With two token pools, the refusal is read against the scarcer one (`KvAllocFailure.pool`).
#: 0.3.0 printed only "Decode out of memory happened" (no figures: the sglang_retraction signal).
KV_ALLOC_FORMATS = {
    "head": "{phase} out of memory. Try to lower your batch size.",
    "asked": "Try to allocate {requested} tokens.",
    "avaliable": "Avaliable tokens: {available}",
    "available": "Available tokens: {available}",
    "debug_free": "self.token_to_kv_pool_allocator.available_size()={free}",
    "debug_evictable": "self.tree_cache.evictable_size()={evictable}",
    "available_split": "Available tokens: {available} (available_size={free} + evictable_size={evictable})",
    "full_split": "Available full tokens: {available} (full_available_size={free} + full_evictable_size={evictable})",
    "swa_split": "Available swa tokens: {available} (swa_available_size={free} + swa_evictable_size={evictable})",
    "unified_full": "Available full tokens: {available} (full_available_size={free} + full_evictable_size_={evictable})",
    "unified_swa": "Available swa: {available} (available_size={free} + component_evictable_size_={evictable})",
}
_ALLOC_HEAD = re.compile(r"\b(Prefill|Decode|)\s?(?:[Oo]ut of memory)\. Try to lower your batch size\.")
_ALLOC_ASKED = re.compile(r"\bTry to allocate (\d{1,12}) tokens\.")
_ALLOC_AVAILABLE = re.compile(
    r"\bAva(?:li|il)able tokens: (\d{1,12})(?: \(available_size=(\d{1,12}) \+ evictable_size=(\d{1,12})\))?")
_ALLOC_DEBUG_FREE = re.compile(r"\bself\.token_to_kv_pool_allocator\.available_size\(\)=(\d{1,12})")
_ALLOC_DEBUG_EVICTABLE = re.compile(r"\bself\.tree_cache\.evictable_size\(\)=(\d{1,12})")
#: a pool of its own: (pool, total, free, evictable); "swa tokens" to 0.5.20, "swa" after
_ALLOC_POOL = re.compile(
    r"\bAvailable (full|swa)(?: tokens)?: (\d{1,12}) \((?:full_|swa_)?available_size=(\d{1,12}) \+ "
    r"(?:full_|swa_|component_)?evictable_size_?=(\d{1,12})\)")
#: how many messages after the head its figures may come (the f-string's next lines)
_ALLOC_LOOK_AHEAD = 4
#: the same figures again within this many messages: the raised copy of a logged refusal
_ALLOC_SAME = 40


class FailureReader:
    """Feeds on log messages; `oom()` and `parallel()` are what they said about the failure."""

    def __init__(self) -> None:
        self._line = 0
        self._phase: str | None = None
        self._first: dict | None = None
        self._waiting_phase: dict | None = None
        self._open: dict | None = None
        self._count = 0
        self._parallel: ParallelError | None = None
        self._alloc_open: dict | None = None
        self._alloc: KvAllocFailure | None = None
        self._alloc_count = 0
        self._alloc_last: tuple[tuple | None, int] = (None, 0)

    def feed(self, message: str, counted: bool = True, line: str | None = None) -> None:
        """Read one message. `counted=False`: a copy another rank printed (read, not counted).
        `line`: the whole line, prefix included (a logger's file name can name the phase)."""
        self._line += 1
        open_oom = self._open
        if open_oom is not None:
            self._open = None
            block = _BLOCK_LINE.match(message) is not None
            self._update(open_oom, open_oom["text"] + (" " if block else "") + message)
            # torch's allocator block ("Currently allocated : ...", "Device limit : ...") runs
            # over several lines: keep reading it until a line closes the message
            if (block and not any(end in message for end in _OOM_END)
                    and self._line - open_oom["line"] < _BLOCK_LINES):
                self._open = open_oom
        marker = self._marker(line if line is not None else message)
        if _OOM.search(message):
            if counted:
                self._count += 1
            oom = {"text": message, "phase": marker or self._phase, "line": self._line}
            self._update(oom, message)
            if not any(end in message for end in _OOM_END):
                self._open = oom
            if self._first is None or (not self._first["numbers"] and oom["numbers"]):
                self._first = oom
            if oom["phase"] is None:
                self._waiting_phase = oom
        elif marker is not None:
            waiting = self._waiting_phase
            if waiting is not None and self._line - waiting["line"] <= _LOOK_AHEAD:
                waiting["phase"] = marker
            self._waiting_phase = None
            self._phase = marker
        if self._parallel is None:
            self._parallel = parallel_error(message)
        self._feed_alloc(message, counted)

    def _feed_alloc(self, message: str, counted: bool) -> None:
        """SGLang's allocator refusal: the head line, then "Try to allocate N tokens." and the
        figures (`KV_ALLOC_FORMATS`; several may share one line once a traceback joins them).
        The refusal is taken once its figures are complete, or when a line after them has none."""
        head = _ALLOC_HEAD.search(message) if "of memory. Try to lower" in message else None
        if head is not None:
            self._close_alloc()
            phase = head.group(1).lower() or None
            self._alloc_open = {"phase": phase, "line": self._line, "example": message.strip()[:EXAMPLE_CHARS],
                                "counted": counted}
        opened = self._alloc_open
        if opened is None:
            return
        if self._line - opened["line"] > _ALLOC_LOOK_AHEAD:
            self._close_alloc()
            return
        asked = _ALLOC_ASKED.search(message)
        if asked is not None:
            opened["requested"] = int(asked.group(1))
        if "requested" not in opened:
            return
        figures = opened.setdefault("figures", {})
        read = False
        available = _ALLOC_AVAILABLE.search(message)
        if available is not None:
            read = True
            figures["tokens"] = [int(available.group(1)),
                                 int(available.group(2)) if available.group(2) else None,
                                 int(available.group(3)) if available.group(3) else None]
        for pool in _ALLOC_POOL.finditer(message):
            read = True
            figures[pool.group(1)] = [int(pool.group(2)), int(pool.group(3)), int(pool.group(4))]
        tokens = figures.get("tokens")
        if tokens is not None:
            for pattern, at in ((_ALLOC_DEBUG_FREE, 1), (_ALLOC_DEBUG_EVICTABLE, 2)):
                found = pattern.search(message)
                if found is not None:
                    read = True
                    tokens[at] = int(found.group(1))
        if not figures:
            return
        complete = (tokens is not None and tokens[2] is not None) or "swa" in figures
        if complete or not read:
            self._close_alloc()

    def _close_alloc(self) -> None:
        """Take the open refusal's figures, if it printed any; the scarcer token pool decides."""
        opened, self._alloc_open = self._alloc_open, None
        if opened is None or not opened.get("figures"):
            return
        figures = opened["figures"]
        pool, (total, free, evictable) = min(figures.items(), key=lambda kv: kv[1][0])
        # SGLang logs the message and then raises it: the traceback's copy of the same
        # figures a few lines on is one refusal, not two
        key = (opened["phase"], opened["requested"], total)
        if opened["counted"] and not (key == self._alloc_last[0] and self._line - self._alloc_last[1] <= _ALLOC_SAME):
            self._alloc_count += 1
        self._alloc_last = (key, self._line)
        if self._alloc is None:
            self._alloc = KvAllocFailure(
                phase=opened["phase"], requested=opened["requested"], available=total, free=free,
                evictable=evictable, example=opened["example"], pool=None if pool == "tokens" else pool)

    @staticmethod
    def _update(oom: dict, text: str) -> None:
        oom["numbers"] = oom_numbers(text)
        form = torch_form(text)
        if form is not None:
            oom["numbers"]["torch_form"] = form
        oom["text"] = text

    @staticmethod
    def _marker(message: str) -> str | None:
        if not any(map(message.__contains__, _MARKER_NEEDLES)):
            return None
        for phase, needles in _MARKERS:
            if any(map(message.__contains__, needles)):
                return phase
        return None

    def oom(self) -> CudaOom | None:
        first = self._first
        if first is None:
            return None
        return CudaOom(count=max(1, self._count), phase=first["phase"], example=first["text"].strip()[:EXAMPLE_CHARS],
                       **first["numbers"])

    def parallel(self) -> ParallelError | None:
        return self._parallel

    def kv_alloc(self) -> KvAllocFailure | None:
        """The first allocator refusal that printed its figures, with how many the log has."""
        self._close_alloc()
        if self._alloc is None:
            return None
        return KvAllocFailure(**{**self._alloc.__dict__, "count": max(1, self._alloc_count)})
