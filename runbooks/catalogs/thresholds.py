"""The runbook's numbers, in one place so a reader can argue with them."""

#: GPU memory above this share of the card must be explained (runbook: >90% sustained)
GPU_MEM_PINNED_RATIO = 0.90
#: the GPU-memory alert (issue 11): above this share for 10 minutes, on pods whose engine does not
#: claim its memory at start-up (for vLLM, SGLang and TGI a full card is their fraction at work)
GPU_MEM_ALERT_RATIO = 0.95
#: static memory (weights + reserve) above this share leaves too little for the KV cache
STATIC_CRITICAL_RATIO = 0.85
STATIC_WARNING_RATIO = 0.70
#: KV-cache block usage at which new requests start to wait or preempt
KV_USAGE_HIGH_RATIO = 0.90
#: queue depth alert (runbook: > 12 for 10 min)
QUEUE_DEPTH_ALERT = 12
#: L+XL share that makes a pool "long-context"; a jump this large is the classic trigger
LONG_SHARE_HIGH = 0.30
LONG_SHARE_SHIFT = 0.15
#: a pool is mixed when both short (S) and long (L+XL) traffic are substantial
MIXED_SHORT_SHARE = 0.30
MIXED_LONG_SHARE = 0.15
#: engine memory fractions at or above these leave no margin for activations and fragmentation.
#: TGI has none: its --cuda-memory-fraction caps torch and the KV cache is sized inside the cap,
#: so a high one (1.0 is its default) takes no margin from activations
VLLM_UTIL_EDGE = 0.93
SGLANG_MFS_EDGE = 0.90
#: the runbook's stop-the-bleeding template
SAFE_MAX_MODEL_LEN = 4096
SAFE_MAX_NUM_SEQS = 32
SAFE_VLLM_UTIL = 0.88
#: headroom the safe flags aim for: KV demand at the cap no more than this share of capacity
SAFE_KV_TARGET_RATIO = 0.90
#: a model needs minutes to load; liveness budgets below this kill it while it loads
MODEL_LOAD_BUDGET_S = 300
#: TTFT p99 above this, with a mixed pool, is short requests queueing behind long ones
TTFT_P99_SLOW_S = 2.0
#: GPU compute utilisation below this while memory is pinned: the misjudgement "util is low"
LOW_GPU_UTIL_PCT = 50.0
#: "for 10 min" in the runbook's alerts: a reading above its line this long is sustained
SUSTAINED_S = 600
