"""Text to evidence: nvidia-smi, metrics, logs, launch forms, Kubernetes objects, model configs.
Files are read here; nothing here opens a network connection or starts a process."""
