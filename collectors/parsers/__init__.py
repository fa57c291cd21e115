"""Text to evidence: nvidia-smi, metrics, logs, access logs, launch forms, Kubernetes objects, model
configs, bundles. Files are read here; nothing here opens a network connection."""
