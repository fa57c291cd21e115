"""The live Kubernetes collector's errors, apart from its client: a surface that only catches
them (the fleet view, an offline triage) does not import the Kubernetes client (about 0.3 s)."""

from __future__ import annotations

from collectors.errors import CollectorError


class KubeError(CollectorError):
    """Base of the live Kubernetes collector's errors."""


class KubeConfigError(KubeError):
    """No usable kubeconfig, context or in-cluster service account.

    `reason`: the Kubernetes client's own words; `kubeconfig`: the file named (None: the
    default one, $KUBECONFIG or ~/.kube/config); `in_cluster`: the pod's service account was
    asked. The message (for logs) is English; a surface words the source in its language.

    >>> str(KubeConfigError("Invalid kube-config file. No configuration found.", None))
    'default kubeconfig: Invalid kube-config file. No configuration found.'
    """

    def __init__(self, reason: str, kubeconfig: str | None = None, in_cluster: bool = False):
        self.reason = reason
        self.kubeconfig = kubeconfig
        self.in_cluster = in_cluster
        where = "in-cluster service account" if in_cluster else (kubeconfig or "default kubeconfig")
        super().__init__(f"{where}: {reason}")
