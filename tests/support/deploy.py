"""deploy/ rendered for the tests: every overlay alone and with every component, through
tests/support/kustomize.py (compared with `kubectl kustomize` in tests/test_deploy_kustomize.py)."""

from __future__ import annotations

import copy
import functools
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.support import kustomize

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "deploy"
OVERLAYS = tuple(sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir()))
COMPONENTS = tuple(sorted(p.name for p in (DEPLOY / "components").iterdir() if p.is_dir()))
#: every install docs/install.md describes: each overlay as shipped, and with all the components
VARIANTS = tuple([(o, ()) for o in OVERLAYS] + [(o, COMPONENTS) for o in OVERLAYS])


def variant_id(variant: tuple[str, tuple[str, ...]]) -> str:
    overlay, components = variant
    return "+".join((overlay, *components))


def kustomization_dir(workdir: Path, overlay: str, components: tuple[str, ...]) -> Path:
    """A kustomization in `workdir` that is `overlay` with `components` added, as a platform
    engineer's own overlay would be (relative paths: kustomize refuses absolute ones)."""
    rel = functools.partial(os.path.relpath, start=workdir)
    doc: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                           "resources": [rel(DEPLOY / "overlays" / overlay)]}
    if components:
        doc["components"] = [rel(DEPLOY / "components" / c) for c in components]
    (workdir / "kustomization.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return workdir


@functools.cache
def _rendered(overlay: str, components: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    if not components:
        return tuple(kustomize.build(DEPLOY / "overlays" / overlay))
    with tempfile.TemporaryDirectory() as tmp:
        return tuple(kustomize.build(kustomization_dir(Path(tmp), overlay, components)))


def render(overlay: str = "read-only", components: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize` prints for the overlay (with the components added)."""
    return copy.deepcopy(list(_rendered(overlay, tuple(components))))


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


def bot_deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment", "gpumem-bot")


#: the install walk-through ("Install in a cluster"), the page the README points at
INSTALL_DOC = ROOT / "docs" / "install.md"


def install_doc() -> str:
    """docs/install.md, the whole page."""
    text = INSTALL_DOC.read_text(encoding="utf-8")
    assert text.startswith("# Install in a cluster\n"), INSTALL_DOC
    return text


def install_doc_commands() -> list[list[str]]:
    """The shell commands of that page's code blocks, split into words (comments dropped)."""
    import shlex

    commands = []
    for block in re.findall(r"```sh\n(.*?)```", install_doc(), flags=re.DOTALL):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append([w for w in words if w != "&"])
    return commands


def install_doc_secrets(namespace: str = "gpumem") -> dict[str, set[str]]:
    """Secret name -> keys, of every `kubectl -n NAMESPACE create secret generic` the section's
    code blocks run."""
    secrets: dict[str, set[str]] = {}
    for words in install_doc_commands():
        if words[:6] == ["kubectl", "-n", namespace, "create", "secret", "generic"]:
            keys = {w.split("=", 2)[1] for w in words[7:] if w.startswith("--from-literal=")}
            secrets.setdefault(words[6], set()).update(keys)
    return secrets
