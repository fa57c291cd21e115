"""Live reads from the Kubernetes API: the client, its typed failures, and one workload's snapshot."""

from collectors.kube._package import register as _register

_register()  # before any module here imports kubernetes (see collectors/kube/_package.py)
