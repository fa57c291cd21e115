"""Access logs as a RequestProfile: the reference line reader (`reference`), the block scanner
(`scan`: compiled from `_access_native.c` where the install could build it, else numpy) and the
process pool that reads a large file in parallel (`fast.scan_access_log`, what callers use);
`request_lengths` reads the same request lines from a server log, and the length histograms
of a metrics scrape."""
