"""The NVML exporter a DaemonSet runs on each GPU node."""
