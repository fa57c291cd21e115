"""The live Kubernetes collector's errors, apart from its client: a surface that only catches
them (the fleet view, an offline triage) does not import the Kubernetes client (about 0.3 s)."""

from __future__ import annotations

from collectors.errors import CollectorError


class KubeError(CollectorError):
    """Base of the live Kubernetes collector's errors."""


class KubeConfigError(KubeError):
    """No usable kubeconfig, context or in-cluster service account."""
