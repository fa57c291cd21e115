"""The stand-in API server's patch mechanics (tests/support/fake_kube_rules.py), checked against
what kube-apiserver's libraries do: apimachinery's strategic merge patch, evanphx/json-patch v4
for RFC 6902, RFC 7386 merge patch; and the Status bodies and Go-printed values of its errors."""

from __future__ import annotations

import pytest

from tests.support import fake_kube_rules as rules

POD = {
    "spec": {
        "template": {
            "metadata": {"labels": {"app": "vllm"}},
            "spec": {
                "containers": [
                    {"name": "vllm", "image": "vllm/vllm-openai:v0.6.6", "args": ["--a", "--b"],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 8000, "name": "http"}],
                     "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"},
                                      {"name": "cache", "mountPath": "/root/.cache"}]},
                    {"name": "sidecar", "image": "busybox"},
                ],
                "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}, {"name": "cache", "emptyDir": {}}],
            },
        },
    },
}


def _smp(patch: dict) -> dict:
    return rules.strategic_merge(POD, patch, "Deployment")


def _containers(doc: dict) -> list[dict]:
    return doc["spec"]["template"]["spec"]["containers"]


# ------------------------------------------------------------------ strategic merge


def test_containers_merge_by_name_and_atomic_lists_are_replaced():
    out = _smp({"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "image": "vllm/vllm-openai:v0.7.0", "args": ["--c"]}]}}}})
    vllm, sidecar = _containers(out)
    assert vllm["image"] == "vllm/vllm-openai:v0.7.0"
    assert vllm["args"] == ["--c"]  # args has no patch strategy: replaced whole
    assert [e["name"] for e in vllm["env"]] == ["A", "B"]  # untouched fields stay
    assert sidecar == {"name": "sidecar", "image": "busybox"}
    assert POD["spec"]["template"]["spec"]["containers"][0]["args"] == ["--a", "--b"]  # the original is not touched


def test_a_new_list_item_goes_before_the_live_ones_as_kubectl_patch_shows():
    out = _smp({"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "env": [{"name": "C", "value": "3"}, {"name": "A", "value": "one"}]}]}}}})
    env = _containers(out)[0]["env"]
    # patch items in patch order, live-only items after them where the live order cannot place them
    assert env == [{"name": "C", "value": "3"}, {"name": "A", "value": "one"}, {"name": "B", "value": "2"}]


def test_ports_merge_by_container_port_and_mounts_by_mount_path():
    out = _smp({"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "ports": [{"containerPort": 8000, "protocol": "TCP"}, {"containerPort": 9000}],
         "volumeMounts": [{"mountPath": "/dev/shm", "readOnly": True}]}]}}}})
    vllm = _containers(out)[0]
    assert vllm["ports"] == [{"containerPort": 8000, "name": "http", "protocol": "TCP"}, {"containerPort": 9000}]
    assert vllm["volumeMounts"][0] == {"name": "shm", "mountPath": "/dev/shm", "readOnly": True}
    assert len(vllm["volumeMounts"]) == 2


def test_patch_delete_directive_removes_the_item_with_that_key():
    out = _smp({"spec": {"template": {"spec": {
        "containers": [{"name": "vllm", "env": [{"name": "B", "$patch": "delete"}],
                        "volumeMounts": [{"mountPath": "/root/.cache", "$patch": "delete"}]},
                       {"name": "sidecar", "$patch": "delete"}],
        "volumes": [{"name": "cache", "$patch": "delete"}]}}}})
    assert [c["name"] for c in _containers(out)] == ["vllm"]
    assert _containers(out)[0]["env"] == [{"name": "A", "value": "1"}]
    assert [m["name"] for m in _containers(out)[0]["volumeMounts"]] == ["shm"]
    assert out["spec"]["template"]["spec"]["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory"}}]


def test_patch_replace_directive_in_a_list_and_in_a_map():
    out = _smp({"spec": {"template": {"spec": {
        "volumes": [{"$patch": "replace"}, {"name": "models", "hostPath": {"path": "/models"}}],
        "containers": [{"name": "vllm", "resources": {"$patch": "replace", "limits": {"nvidia.com/gpu": "2"}}}]}}}})
    assert out["spec"]["template"]["spec"]["volumes"] == [{"name": "models", "hostPath": {"path": "/models"}}]
    assert _containers(out)[0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}


def test_null_deletes_a_field_and_a_map_directive_delete_empties_it():
    out = _smp({"spec": {"template": {"metadata": {"labels": {"$patch": "delete"}},
                                      "spec": {"containers": [{"name": "vllm", "args": None}]}}}})
    assert out["spec"]["template"]["metadata"]["labels"] == {}
    assert "args" not in _containers(out)[0]


def test_set_element_order_delete_from_primitive_list_and_retain_keys():
    doc = {"metadata": {"finalizers": ["a", "b", "c"]},
           "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}, **POD["spec"]}}
    out = rules.strategic_merge(doc, {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]},
        "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"},
                 "template": {"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "vllm"}]}}},
    }, "Deployment")
    assert out["metadata"]["finalizers"] == ["a", "c"]
    assert out["spec"]["strategy"] == {"type": "Recreate"}
    assert [c["name"] for c in _containers(out)] == ["sidecar", "vllm"]


def test_a_list_item_without_its_merge_key_is_an_error_as_the_server_words_it():
    with pytest.raises(rules.Refusal) as refused:
        _smp({"spec": {"template": {"spec": {"containers": [{"image": "x:1"}]}}}})
    assert refused.value.code == 500
    assert refused.value.body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "map: map[image:x:1] does not contain declared merge key: name",
                                  "code": 500}


def test_an_unknown_directive_is_refused():
    with pytest.raises(rules.Refusal) as refused:
        _smp({"spec": {"template": {"spec": {"$patch": "frob"}}}})
    assert refused.value.body["message"] == "unknown patch type: frob in map: map[$patch:frob]"


def test_service_ports_merge_by_port():
    svc = {"spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8000}]}}
    out = rules.strategic_merge(svc, {"spec": {"ports": [{"port": 80, "targetPort": 8001}, {"port": 9090}]}}, "Service")
    assert out["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8001}, {"port": 9090}]


# ------------------------------------------------------------------------ JSON patch


def test_json_patch_operations_apply_in_order():
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    out = rules.json_patch(doc, [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "test", "path": "/a/b/3", "value": 3.0},  # JSON numbers compare by value
        {"op": "replace", "path": "/c", "value": "y"},
        {"op": "copy", "from": "/c", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e~1f"},
        {"op": "remove", "path": "/a/b/-1"},  # json-patch v4 counts negative indices from the end
        {"op": "test", "path": "/missing", "value": None},  # v4: null tests true against nothing
    ])
    assert out == {"a": {"b": [0, 1, 2]}, "c": "y", "e/f": "y"}
    assert doc == {"a": {"b": [1, 2]}, "c": "x"}


@pytest.mark.parametrize("op", [
    {"op": "test", "path": "/c", "value": "z"},
    {"op": "test", "path": "/flag", "value": 1},  # true is not 1
    {"op": "replace", "path": "/nope", "value": 1},
    {"op": "remove", "path": "/a/b/5"},
    {"op": "add", "path": "/nope/deeper", "value": 1},
    {"op": "frob", "path": "/c"},
])
def test_an_operation_that_does_not_apply_is_a_generic_422(op):
    with pytest.raises(rules.Refusal) as refused:
        rules.json_patch({"a": {"b": [1]}, "c": "x", "flag": True}, [op])
    assert refused.value.code == 422
    assert refused.value.body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server rejected our request due to an error in our request", "reason": "Invalid",
        "details": {}, "code": 422}


def test_patch_bodies_that_do_not_decode_are_400s_in_the_handlers_words():
    def message(patch_type: str, body: str, validation: str | None = None) -> str:
        with pytest.raises(rules.Refusal) as refused:
            rules.decode_patch(patch_type, body, validation)
        assert refused.value.code == 400
        return refused.value.body["message"]

    json_type, merge, smp = rules.PATCH_TYPES
    assert message(json_type, '{"spec": {}}') == (
        "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")
    assert message(json_type, '{"spec": {}}', "Ignore") == (
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    assert message(merge, "[1]") == (
        "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}")
    assert message(smp, "[1]") == "json: cannot unmarshal array into Go value of type map[string]interface {}"
    assert message(merge, "{x") == "error decoding patch: invalid character 'x' looking for beginning of object key string"


def test_merge_patch_merges_objects_deletes_nulls_and_replaces_lists():
    out = rules.merge_patch(POD, {"spec": {"template": {"metadata": {"labels": {"app": None, "new": "1"}},
                                                        "spec": {"containers": [{"name": "only"}]}}}})
    assert out["spec"]["template"]["metadata"]["labels"] == {"new": "1"}
    assert _containers(out) == [{"name": "only"}]


# --------------------------------------------------------------- errors as printed


def test_invalid_lists_several_field_errors_in_brackets_with_causes():
    body = rules.invalid("apps", "Deployment", "x", [
        rules.invalid_value("spec.replicas", -1, "must be greater than or equal to 0"),
        rules.required("spec.template.spec.containers[0].image"),
        rules.invalid_value("spec.template.metadata.labels", {"b": "2", "a": "1"},
                            "`selector` does not match template `labels`")])
    assert body["message"] == (
        'Deployment.apps "x" is invalid: [spec.replicas: Invalid value: -1: must be greater than or equal to 0, '
        "spec.template.spec.containers[0].image: Required value, spec.template.metadata.labels: Invalid value: "
        'map[string]string{"a":"1", "b":"2"}: `selector` does not match template `labels`]')
    assert body["details"]["causes"][1] == {"reason": "FieldValueRequired", "message": "Required value",
                                            "field": "spec.template.spec.containers[0].image"}
    assert body["code"] == 422 and body["reason"] == "Invalid"


def test_selectors_format_as_kubectl_shows_them_and_hashes_have_the_controllers_alphabet():
    selector = {"matchLabels": {"app": "vllm-server"},
                "matchExpressions": [{"key": "track", "operator": "NotIn", "values": ["canary", "blue"]}]}
    assert rules.format_selector(selector) == "app=vllm-server,track notin (blue,canary)"
    assert rules.selector_matches(selector, {"app": "vllm-server", "track": "stable"})
    assert not rules.selector_matches(selector, {"app": "vllm-server", "track": "canary"})
    digest = rules.pod_template_hash({"spec": {"containers": [{"name": "vllm"}]}})
    assert 1 <= len(digest) <= 10 and set(digest) <= set("4567896bcdf")
    assert digest == rules.pod_template_hash({"spec": {"containers": [{"name": "vllm"}]}})
    assert rules.go_duration(80) == "1m20s" and rules.go_duration(300) == "5m0s" and rules.go_duration(10) == "10s"
