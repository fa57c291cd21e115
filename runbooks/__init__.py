"""Pure knowledge of GPU memory in LLM serving: no network, no files, no clock (pass `now` in)."""
