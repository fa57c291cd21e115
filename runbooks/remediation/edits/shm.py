"""`AddShm`: an emptyDir of medium Memory with a sizeLimit mounted at /dev/shm (NCCL with TP > 1)."""

from __future__ import annotations

from typing import Any

from runbooks.model.changes import AddShm
from runbooks.model.errors import UsageError
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.common import KindEdit, append_op, get_in, invalid, set_op
from runbooks.remediation.edits.launch_edit import POD_PATH, server_container
from runbooks.remediation.edits.quantities import canonical_quantity
from runbooks.remediation.edits.reader import ContainerReader

SHM_PATH = "/dev/shm"
SHM_VOLUME = "dshm"


def shm(workload: dict[str, Any], container: str | None, size: Any, *, reader: ContainerReader) -> KindEdit:
    """An emptyDir (medium Memory, sizeLimit `size`) at /dev/shm in the server container; when
    one is mounted there already, its sizeLimit changes."""
    limit = canonical_quantity(size, "--shm-size")
    index, spec, _config = server_container(workload, container, reader=reader)
    pod = get_in(workload, "spec", "template", "spec") or {}
    volumes = pod.get("volumes")
    mounts = spec.get("volumeMounts")
    mount = next((m for m in mounts or [] if isinstance(m, dict) and m.get("mountPath") == SHM_PATH), None)
    name = spec.get("name")
    if mount is not None:
        at = next((i for i, v in enumerate(volumes or []) if isinstance(v, dict) and v.get("name") == mount.get("name")),
                  None)
        volume = (volumes or [])[at] if at is not None else None
        empty = volume.get("emptyDir") if isinstance(volume, dict) else None
        if not isinstance(empty, dict) or empty.get("medium") != "Memory":
            raise invalid(f"spec.template.spec.volumes[{mount.get('name')}]", Phrase("reason.not_memory_empty_dir"),
                          Phrase("reason.shm_other_volume"))
        if empty.get("sizeLimit") == limit:
            raise UsageError("nothing_to_change", what=Phrase("reason.shm_already", {"limit": limit}))
        new = {**empty, "sizeLimit": limit}
        return KindEdit((AddShm(name, empty.get("sizeLimit"), limit),),
                        tuple(set_op(f"{POD_PATH}/volumes/{at}/emptyDir", True, empty, new)))
    taken = {v.get("name") for v in volumes or [] if isinstance(v, dict)}
    volume_name = SHM_VOLUME if SHM_VOLUME not in taken else "gpumem-dshm"
    if volume_name in taken:
        raise invalid("spec.template.spec.volumes", volume_name, Phrase("reason.volume_exists"))
    ops = append_op(f"{POD_PATH}/volumes", volumes, {"name": volume_name, "emptyDir": {"medium": "Memory",
                                                                                          "sizeLimit": limit}},
                    "spec.template.spec.volumes")
    ops += append_op(f"{POD_PATH}/containers/{index}/volumeMounts", mounts,
                     {"name": volume_name, "mountPath": SHM_PATH}, f"containers[{name}].volumeMounts")
    return KindEdit((AddShm(name, None, limit),), tuple(ops))


def edit(workload: dict[str, Any], change: AddShm, container: str | None, reader: ContainerReader) -> KindEdit:
    """The registry's entry: /dev/shm of the change's size."""
    return shm(workload, container, change.new, reader=reader)
