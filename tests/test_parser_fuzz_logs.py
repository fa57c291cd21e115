"""Fuzz: server-log and access-log readers return their typed result (or ParseError), nothing else."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import collectors.access_logs.fast as fast
from collectors.access_logs.fast import scan_access_log
from collectors.access_logs.reference import parse_access_line, parse_access_lines, read_access_log
from collectors.errors import ParseError
from collectors.parsers.kube_tables import parse_pod_text
from collectors.parsers.log_failures import FailureReader, oom_numbers
from collectors.parsers.log_launch import LaunchScanner
from collectors.parsers.logs import parse_server_log, read_server_log
from runbooks.catalogs.signals import SIGNAL_KEYS
from runbooks.model.evidence import (
    OOM_PHASES,
    PARALLEL_ERRORS,
    CudaOom,
    KvAllocFailure,
    LogSignals,
    ParallelError,
    PodState,
    ServerConfig,
)
from runbooks.model.lengths import RequestProfile

# pieces of real lines, glued together at random so the fuzz reaches the deeper branches
_FRAGMENTS = [
    "INFO 05-10 12:00:05 metrics.py:341] ", "WARNING 13-45 99:99:99 a.py:1] ", "(APIServer pid=1) ",
    "(EngineCore_0 pid=57) ERROR 02-30 12:00:00 [core.py:7] ", "2024-06-01T12:00:00.123456789Z ",
    "2024-13-01T25:61:00Z ", "[2025-03-01 12:00:00 DP0 TP0] ", "[9999-99-99 99:99:99 TP0] ",
    "time=2026-03-09T2017Z ", "time=2026-02-30T2599Z ", 'ts="2026-03-09 20:17:30+99:99" ', "\x1b[1;36m", "{",
    '{"timestamp": 5, "fields": {"message": ', '{"timestamp":"2024-09-10T08:00:40Z","fields":{"message":"',
    "CUDA out of memory", "total_num_cumulative_preemption=", "is preempted by PreemptionMode.SWAP",
    "#retracted_reqs: ", "KV cache pool is full. Retract requests. ", "Running: ", " reqs, Pending: ",
    "GPU KV cache usage: ", "%", "token usage: ", "#running-req: ", "#queue-req: ", "Decode batch. ",
    "# GPU blocks: ", "GPU KV cache size: ", " tokens", "Maximum concurrency for ", " tokens per request: ",
    "x", "Free memory on device (", "/", " GiB) on startup. Desired GPU memory utilization is (", ", ",
    "KV Cache is allocated. #tokens: ", "K size: ", " GB, V size: ", " GB", "KV-cache blocks: ", ", size: ",
    "max_total_num_tokens=", "context_len=", "Memory profiling results: total_gpu_memory=", "GiB ",
    "vLLM API server version ", "text_generation_launcher", "sglang==", "max seq len (", ")",
    "Setting max batch total tokens to ", "Model loading took ", "input_tokens=", "output_tokens=",
    "'prompt_tokens': ", "'completion_tokens': ", '"usage": {"prompt_tokens": ', ', "completion_tokens": ',
    "}", '"created": ', "1773087300", "1e999", "-1", "0", "9" * 40, "1,234,567", "3.5", "\ud800", "\x00",
    " ", "\t", "\r", '"',
    # launches pasted on top of a log, and the engines' own settings printouts
    "vllm serve ", "python -m vllm.entrypoints.openai.api_server ", "python3 -m sglang.launch_server ",
    "text-generation-launcher ", "docker run --gpus all -e A=b ", "vllm/vllm-openai:v0.6.4 ",
    "ghcr.io/huggingface/text-generation-inference:2.3.1 ", "--model ", "--max-model-len ", "--tp ", " \\",
    "--gpu-memory-utilization=", "LLM(model='m', gpu_memory_utilization=", "image: vllm/vllm-openai", "command: ",
    "    --max-num-seqs ", "Initializing an LLM engine (v0.5.4) with config: max_seq_len=",
    "args: Namespace(tensor_parallel_size=", "non-default args: {'max_model_len': ", "server_args=ServerArgs(",
    "Args { model_id: ", "num_shard: Some(", "{ model_id: \"", "mem_fraction_static=", "--mem-fraction-static=",
    # TGI's router positions and env block, which bound its release
    "INFO text_generation_router: router/src/main.rs:", "text_generation_router_v3: backends/v3/src/lib.rs:",
    "354: Setting max batch total tokens to ", ": Warming up model", "- Commit sha: ",
    "c38a7d7ddd9c612e368adec1ef94583be602fc7e",
    # CUDA OOMs, their phases, and layouts the engines refuse
    "Tried to allocate ", " MiB. GPU 0 has a total capacty of ", " GiB of which ", " is free. Process 9 has ",
    " GiB memory in use. Of the allocated memory ", " GiB is allocated by PyTorch, and ",
    " is reserved by PyTorch but unallocated", "(GPU 0; ", " GiB total capacity; ", " already allocated; ",
    " reserved in total by PyTorch)", "Capturing cudagraphs", "_dummy_sampler_run", "load_weights",
    "Avg prompt throughput", "warming up sampler with ", " dummy requests",
    "Total number of attention heads (", ") must be divisible by tensor parallel size (",
    "Tensor parallel size (", ") exceeds available GPUs (", "NCCL error: unhandled system error", "/dev/shm",
    "estimated maximum model length is ",
    # SGLang's KV-allocator refusal, both spellings of its figures
    "Decode out of memory. Try to lower your batch size.", "Out of memory. Try to lower your batch size.",
    "Prefill out of memory. Try to lower your batch size.\n", "Try to allocate ", " tokens.", "Avaliable tokens: ",
    "Available tokens: ", " (available_size=", " + evictable_size=", "initial_memory_usage=", "Load weight end. avail mem=", " mem usage=",
    # TGI's Args printed one field per line (2.0.2+) and the limits its launcher chose
    "INFO text_generation_launcher: Args {", "    num_shard: Some(", "        2,", "    ),", "}", "Some(", "[",
    "],", "Default `max_total_tokens` to ", "Default `max_batch_prefill_tokens` to ",
    # prefixes: docker compose, torch ranks, worker tags; kubectl output
    "vllm-1  | ", "[rank0]: ", "(VllmWorker rank=0 pid=85) ", "| ERROR | stderr | ",
    "NAME   READY   STATUS   RESTARTS   AGE", "pod-0   0/1   CrashLoopBackOff   5 (13s ago)   3m",
    "Name:   pod-0", "  vllm:", "    Last State:  Terminated", "      Reason:  OOMKilled", "    Restart Count:  ",
]
_NUMBERS = st.one_of(st.integers(-10, 10**30).map(str), st.floats(allow_nan=True).map(str))
_PIECE = st.one_of(st.sampled_from(_FRAGMENTS), _NUMBERS, st.text(max_size=8))
_LOGLIKE = st.lists(_PIECE, max_size=12).map("".join)
_LINES = st.lists(st.one_of(_LOGLIKE, st.text(max_size=80)), max_size=30)
_YEARS = st.one_of(st.none(), st.integers(1, 9999))


@settings(max_examples=200, deadline=None)
@given(_LINES, _YEARS)
def test_server_log_parser_never_raises_on_any_lines(lines, year):
    logs = parse_server_log(lines, source="logs.txt", year=year)
    assert isinstance(logs, LogSignals)
    assert logs.lines == len(lines)
    assert all(s.key in SIGNAL_KEYS and s.count >= 1 for s in logs.signals)
    assert all(s.example is None or len(s.example) <= 300 for s in logs.signals)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000), _YEARS)
def test_server_log_parser_never_raises_on_any_text(text, year):
    assert isinstance(parse_server_log(text, year=year), LogSignals)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000))
def test_server_log_file_reader_never_raises_on_any_bytes(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logs.txt"
        path.write_bytes(data)
        assert isinstance(read_server_log(path, source="logs.txt", year=2025), LogSignals)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_LOGLIKE, st.text(max_size=80)), max_size=30))
def test_access_lines_give_a_profile_or_a_parse_error(lines):
    try:
        profile = parse_access_lines(lines, source="access.log")
    except ParseError as e:
        assert e.source == "access.log"
        assert e.line == 1
        return
    assert isinstance(profile, RequestProfile)
    assert profile.total == sum(b.count for b in profile.buckets)


@settings(max_examples=200, deadline=None)
@given(_LOGLIKE)
def test_one_access_line_gives_counts_or_none(line):
    found = parse_access_line(line)
    assert found is None or (0 <= found[0] < 10**9 and 0 <= found[1] < 10**9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_LOGLIKE, st.text(max_size=40)), max_size=20).map("\n".join), st.integers(1, 50))
def test_access_log_file_reads_the_same_whatever_the_chunk_size(text, chunk_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "access.log"
        path.write_bytes(text.encode("utf-8", "replace"))
        results = []
        for size in (chunk_bytes, 1024 * 1024):
            try:
                results.append(read_access_log(path, chunk_bytes=size))
            except ParseError as e:
                results.append(("ParseError", e.source, e.line))
        assert results[0] == results[1]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000))
def test_access_log_file_reader_gives_a_profile_or_a_parse_error_on_any_bytes(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "access.log"
        path.write_bytes(data)
        try:
            assert isinstance(read_access_log(path), RequestProfile)
        except ParseError as e:
            assert e.source == "access.log"


@settings(max_examples=200, deadline=None)
@given(_LINES)
def test_launch_scanner_gives_a_server_config_or_none(lines):
    scanner = LaunchScanner()
    for line in lines:
        scanner.feed(line)
    cfg = scanner.result()
    assert cfg is None or isinstance(cfg, ServerConfig)


@settings(max_examples=200, deadline=None)
@given(_LINES)
def test_failure_reader_gives_typed_oom_and_layout_errors(lines):
    reader = FailureReader()
    for line in lines:
        reader.feed(line)
    oom = reader.oom()
    assert oom is None or (isinstance(oom, CudaOom) and oom.count >= 1 and oom.phase in (None, *OOM_PHASES))
    err = reader.parallel()
    assert err is None or (isinstance(err, ParallelError) and err.kind in PARALLEL_ERRORS)
    assert all(v >= 0 for v in oom_numbers("".join(lines)).values())
    alloc = reader.kv_alloc()
    assert alloc is None or (isinstance(alloc, KvAllocFailure) and alloc.count >= 1 and alloc.requested >= 0
                             and alloc.available >= 0 and alloc.phase in (None, "decode", "prefill"))


_ALLOC_LINES = st.lists(st.one_of(
    st.sampled_from(["Decode out of memory. Try to lower your batch size.", "Out of memory. Try to lower your batch size.",
                     "RuntimeError: Prefill out of memory. Try to lower your batch size."]),
    st.integers(-5, 10**15).map("Try to allocate {} tokens.".format),
    st.tuples(st.sampled_from(["Avaliable", "Available"]), st.integers(-5, 10**15)).map(lambda t: f"{t[0]} tokens: {t[1]}"),
    st.tuples(st.integers(0, 10**13), st.integers(-3, 10**13)).map(
        lambda t: f"Available tokens: {t[0] + t[1]} (available_size={t[0]} + evictable_size={t[1]})"),
    st.text(max_size=30)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(_ALLOC_LINES)
def test_sglang_allocator_refusal_reads_figures_or_nothing(lines):
    logs = parse_server_log("\n".join(lines), year=2026)
    alloc = logs.kv_alloc_failure
    assert alloc is None or (isinstance(alloc, KvAllocFailure) and alloc.requested >= 0 and alloc.available >= 0
                             and alloc.tokens_to_spare == (alloc.available >= alloc.requested))


@settings(max_examples=200, deadline=None)
@given(_LINES)
def test_kubectl_text_gives_pods(lines):
    pods = parse_pod_text("\n".join(lines))
    assert all(isinstance(p, PodState) and p.restarts >= 0 for p in pods)


# pieces of the access-log shapes gateways write (nginx/Apache, Envoy, logfmt, epochs, JSON)
_ACCESS_FRAGMENTS = [
    "10.0.3.7 - - ", "[10/Oct/2026:13:55:36 +0000]", "[31/Feb/2026:99:55:36 +9999]", "[10/Okt/2026:13:55:36 -0700]",
    '"POST /v1/chat/completions HTTP/1.1" 200 1834 ', '"-" "python-httpx/0.27.0" ', "rt=0.812 ", 'uct="0.000" ',
    "[2026-10-10T13:55:36.123Z] ", "[2026-10-10T13:55:36.1234567891+08:00] ", "[2026-13-40 25:61:61 TP0] ",
    "ts=", "time=", "timestamp=", "@timestamp=", "2026-10-10T13:55:36.123+08:00", "2026-10-10 13:55:36Z",
    "2026-03-09T2011Z", "2026-02-30T10:00:00Z", "1791640536", "1791640536.123", "1791640536123", "1791640536.",
    "99999999999999999999", "input_tokens=", "output_tokens=", "prompt_tokens=", "completion_tokens=",
    'input_tokens="', '"', "'", " ", "\t", ",", ";", "(", ")", "{", "}", "[", "]", ":", "=", "\\", "\r",
    '{"usage": {"prompt_tokens": ', ', "completion_tokens": ', "}", '"created": ', '"time": "', '"ts": ',
    '{"id":"chatcmpl-1","object":"chat.completion",', '"choices":[{"index":0}],', '"prompt_tokens_details":{',
    '"ai":{"proxy":{"usage":{', "level=info ", 'msg="request done" ', 'model="qwen2.5 7b" ', "é", "\x00",
]
_ACCESS_PIECE = st.one_of(st.sampled_from(_ACCESS_FRAGMENTS), st.integers(-5, 10**13).map(str), st.text(max_size=6))
_ACCESS_LINE = st.lists(_ACCESS_PIECE, max_size=14).map("".join)


@settings(max_examples=200, deadline=None)
@given(_ACCESS_LINE)
def test_one_shape_line_gives_counts_or_none(line):
    found = parse_access_line(line)
    assert found is None or (0 <= found[0] < 10**9 and 0 <= found[1] < 10**9)


def _ranges_here(path: str, ranges: list[tuple[int, int]], detail: bool) -> list:
    """`fast._scan_ranges` without the process pool: the same ranges through the same
    `_scan_range`, one after the other in this process (a pool per example costs a fork or a
    spawn, and what a line reads as does not depend on the process that reads it; the tests in
    test_access_log_fast.py and test_access_log_shapes.py go through real processes)."""
    return [fast._scan_range(path, start, end, detail) for start, end in ranges]


@settings(max_examples=200, deadline=None)
@given(st.lists(_ACCESS_LINE, max_size=30), st.sampled_from([1, 2]))
def test_both_access_log_readers_give_a_profile_or_a_parse_error_on_shape_lines(lines, workers):
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(fast, "_scan_ranges", _ranges_here):
        path = Path(tmp) / "access.log"
        path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
        for read in (read_access_log, lambda p: scan_access_log(p, workers=workers).profile):
            try:
                assert isinstance(read(path), RequestProfile)
            except ParseError as e:
                assert (e.source, e.line) == ("access.log", 1)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000))
def test_fast_access_log_reader_gives_a_profile_or_a_parse_error_on_any_bytes(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "access.log"
        path.write_bytes(data)
        try:
            assert isinstance(scan_access_log(path, workers=1).profile, RequestProfile)
        except ParseError as e:
            assert e.source == "access.log"
