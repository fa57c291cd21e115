"""collectors.kube loads only the parts of the kubernetes package it uses, and the package still
behaves as a whole one for anything else that imports it (collectors/kube/_package.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import pytest

_PROBE = """
import json, sys
{before}
import collectors.kube.client
loaded = sorted(m for m in sys.modules if m.startswith("kubernetes"))
import kubernetes
out = {{"dynamic_before": "kubernetes.dynamic" in loaded, "client": "kubernetes.client" in loaded,
        "version": kubernetes.__version__}}
import kubernetes.dynamic
from kubernetes import watch
out["watch"] = watch.Watch.__name__
out["dynamic"] = kubernetes.dynamic.DynamicClient.__name__
print(json.dumps(out))
"""


def _probe(before: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(before=before)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def test_a_live_read_loads_client_and_config_without_the_rest_of_the_package():
    out = _probe()
    assert out["client"] is True
    assert out["dynamic_before"] is False  # kubernetes_validate and jsonschema not paid for


@pytest.mark.parametrize("before", ["", "import kubernetes"])
def test_the_package_still_answers_as_a_whole_one(before):
    out = _probe(before)
    assert out["version"] == version("kubernetes")
    assert (out["watch"], out["dynamic"]) == ("Watch", "DynamicClient")
    if before:  # imported whole first: left as it was
        assert out["dynamic_before"] is True
