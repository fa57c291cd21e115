"""The `kubernetes` package, registered without running its `__init__` until something needs it.

`import kubernetes` runs the package's `__init__`, which imports every part of the client
library: `dynamic` (with kubernetes_validate and jsonschema), `watch`, `stream`,
`leaderelection`, `informer`. gpumem uses `kubernetes.client` and `kubernetes.config` only, and
the rest is about 100 ms of every live verb's start (`-X importtime`: 530 ms for client and
config through the package, 430 ms without the rest). `register()` puts the package in
`sys.modules` as its import spec describes it, unexecuted: a part imported by name
(`from kubernetes import client`, `import kubernetes.watch`) loads on its own, and the first
read of anything else on the package (`kubernetes.__version__`, which `kubernetes.dynamic`
imports) runs the real `__init__` then, so the package behaves as if imported whole. Where it
is already imported (a test, an embedding program), it is left as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any


def register() -> None:
    if "kubernetes" in sys.modules:
        return
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed: the import that follows says so in its own words
    package = importlib.util.module_from_spec(spec)

    def __getattr__(name: str) -> Any:  # PEP 562: only for names the package does not hold yet
        if not name.startswith("__") and importlib.util.find_spec(f"kubernetes.{name}") is not None:
            return importlib.import_module(f"kubernetes.{name}")
        _run_init(package)
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'kubernetes' has no attribute {name!r}") from None

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules["kubernetes"] = package


def _run_init(package: ModuleType) -> None:
    """The package's own `__init__`, once, into the registered module."""
    if package.__dict__.pop("__getattr__", None) is None:
        return
    spec = package.__spec__
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(package)
