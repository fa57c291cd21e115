"""deploy/ as a kustomize base, overlays and components: every install renders (the same
objects as `kubectl kustomize`), every rendered object is valid against the Kubernetes schemas
(kubernetes-validate, offline; the Prometheus Operator's kinds against tests/data/crd_schemas),
the RBAC it grants is exactly what the RBAC-coverage tests check, and the overlays and
components carry what they say."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib

import jsonschema
import kubernetes_validate
import pytest
import yaml

from bot.config.settings import load_settings
from tests.support import kustomize
from tests.support.deploy import (
    COMPONENTS,
    DEPLOY,
    OVERLAYS,
    ROOT,
    VARIANTS,
    bot_deployment,
    kustomization_dir,
    one,
    render,
    variant_id,
)
from tests.support.kube_fixtures import RBAC_MANIFEST, WRITER_MANIFEST, rbac_rules

KUBECTL = shutil.which("kubectl")
#: the oldest Kubernetes still in wide use and the newest the schemas cover
KUBE_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
CRD_SCHEMAS = ROOT / "tests" / "data" / "crd_schemas"
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
ALL = [pytest.param(v, id=variant_id(v)) for v in VARIANTS]


def _key(obj: dict) -> tuple:
    return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def test_the_shipped_layout_is_two_overlays_and_three_components():
    assert OVERLAYS == ("read-only", "remediation")
    assert COMPONENTS == ("alerts", "dashboards", "nvml-agent")
    for overlay in OVERLAYS:
        assert kustomize.load_kustomization(DEPLOY / "overlays" / overlay)["resources"][0] == "../../base"
    for component in COMPONENTS:
        assert kustomize.load_kustomization(DEPLOY / "components" / component)["kind"] == "Component"


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: the renderer is not compared with kustomize")
@pytest.mark.parametrize("variant", ALL)
def test_the_renderer_prints_what_kubectl_kustomize_prints(variant, tmp_path):
    overlay, components = variant
    directory = kustomization_dir(tmp_path, overlay, components)
    out = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    theirs = {_key(o): o for o in yaml.safe_load_all(out) if o}
    ours = {_key(o): o for o in render(overlay, components)}
    assert sorted(ours) == sorted(theirs)
    for key, obj in ours.items():
        assert obj == theirs[key], key


def _validate(obj: dict, version: str) -> None:
    if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
        schema = json.loads((CRD_SCHEMAS / f"{obj['kind'].lower()}-monitoring-v1.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(obj)
    else:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("variant", ALL)
def test_every_rendered_object_is_valid_against_the_schemas(variant, version):
    objects = render(*variant)
    assert len(objects) >= 11
    for obj in objects:
        _validate(obj, version)


def test_the_validation_catches_a_misspelt_field_a_wrong_type_and_a_bad_duration():
    dep = bot_deployment(render())
    dep["spec"]["replica"] = dep["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError, match="replica"):
        _validate(dep, KUBE_VERSIONS[0])
    dep = bot_deployment(render())
    dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "3000"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(dep, KUBE_VERSIONS[-1])
    monitor = one(render(), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "half a minute"
    with pytest.raises(jsonschema.ValidationError):
        _validate(monitor, KUBE_VERSIONS[0])
    rule = one(render("read-only", ("alerts",)), "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["for"] = "10 minutes"
    with pytest.raises(jsonschema.ValidationError):
        _validate(rule, KUBE_VERSIONS[0])


def test_the_renderer_refuses_what_it_does_not_implement(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(kustomize.Unsupported, match="commonLabels"):
        kustomize.build(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["svc.yaml"],
        "patches": [{"patch": "kind: Service\napiVersion: v1\nmetadata: {name: s}\nspec: {ports: [{port: 81}]}\n"}]}))
    (tmp_path / "svc.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n")
    with pytest.raises(kustomize.Unsupported, match=r"no merge key known for the list at \.spec\.ports"):
        kustomize.build(tmp_path)


# ----------------------------------------------------------------------------- RBAC


def _grants(objects: list[dict]) -> dict[tuple, list]:
    """(ServiceAccount namespace, name) -> [(binding kind, binding namespace, the rules it grants)]."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o["rules"]
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    grants: dict[tuple, list] = {}
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = b["roleRef"]
        scope = None if ref["kind"] == "ClusterRole" else b["metadata"]["namespace"]
        rules = roles[(ref["kind"], scope, ref["name"])]
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount"
            grants.setdefault((s["namespace"], s["name"]), []).append(
                (b["kind"], b["metadata"].get("namespace"), rules))
    return grants


@pytest.mark.parametrize("variant", ALL)
def test_the_rbac_granted_is_exactly_what_the_rbac_coverage_tests_check(variant):
    objects = render(*variant)
    lease = one(objects, "Role", "gpumem-bot-leader-election")
    expected = {("gpumem", "gpumem"): [("ClusterRoleBinding", None, rbac_rules("ClusterRole", RBAC_MANIFEST)),
                                       ("RoleBinding", "gpumem", lease["rules"])]}
    if variant[0] == "remediation":
        expected[("gpumem", "gpumem-writer")] = [("RoleBinding", "llm", rbac_rules("Role", WRITER_MANIFEST))]
    assert _grants(objects) == expected
    # the bot runs as the reader; the agent (when installed) holds no role and no token
    assert bot_deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "gpumem"
    if "nvml-agent" in variant[1]:
        agent = one(objects, "DaemonSet", "gpumem-agent")["spec"]["template"]["spec"]
        assert agent["serviceAccountName"] == "gpumem-agent" and agent["automountServiceAccountToken"] is False


# ----------------------------------------------------------------------------- overlays and components


def test_everything_lands_in_the_gpumem_namespace_but_the_writers_role_in_the_serving_one():
    objects = render("remediation", COMPONENTS)
    placed = {(o["kind"], o["metadata"]["name"]): o["metadata"].get("namespace") for o in objects}
    assert placed.pop(("Namespace", "gpumem")) is None
    assert placed.pop(("ClusterRole", "gpumem-reader")) is None
    assert placed.pop(("ClusterRoleBinding", "gpumem-reader")) is None
    assert placed.pop(("Role", "gpumem-writer")) == placed.pop(("RoleBinding", "gpumem-writer")) == "llm"
    assert set(placed.values()) == {"gpumem"}
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpumem" for o in objects)


def test_the_image_is_the_packages_version_for_the_bot_and_the_agent():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    objects = render("read-only", ("nvml-agent",))
    images = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["image"]
              for o in objects if o["kind"] in ("Deployment", "DaemonSet")}
    assert images == {"gpumem-bot": f"gpumem:{version}", "gpumem-agent": f"gpumem:{version}"}


def test_the_remediation_config_is_the_base_config_plus_remediation_with_the_mounted_writer(tmp_path):
    base = yaml.safe_load((DEPLOY / "base" / "gpumem.yaml").read_text())
    objects = render("remediation")
    config_text = one(objects, "ConfigMap", _config_name(objects))["data"]["gpumem.yaml"]
    config = yaml.safe_load(config_text)
    assert {k: v for k, v in config.items() if k != "remediation"} == base
    (tmp_path / "gpumem.yaml").write_text(config_text)
    settings = load_settings(tmp_path / "gpumem.yaml", {"POD_NAMESPACE": "gpumem"})
    assert settings.remediation.enabled
    writer_role = one(objects, "Role", "gpumem-writer")
    assert settings.remediation.policy.scopes == (("in-cluster", writer_role["metadata"]["namespace"]),)
    # the writer's kubeconfig and token are mounted where remediation.writer looks
    pod = bot_deployment(objects)["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "writer"]
    assert mount["readOnly"] is True and settings.remediation.writer.kubeconfig == mount["mountPath"] + "/kubeconfig"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "writer"]
    cm_source, secret_source = volume["projected"]["sources"]
    kubeconfig_map = one(objects, "ConfigMap", cm_source["configMap"]["name"])
    token = one(objects, "Secret", secret_source["secret"]["name"])
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "gpumem-writer"}
    one(objects, "ServiceAccount", "gpumem-writer")
    # the kubeconfig loads with the official client: the token and CA files of that mount
    root = tmp_path / "pod"
    for item in secret_source["secret"]["items"]:
        (root / mount["mountPath"].lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / mount["mountPath"].lstrip("/") / item["path"]).write_text(
            {"token": "writer-token-value", "ca.crt": _ca_pem()}[item["key"]])
    kubeconfig = kubeconfig_map["data"]["kubeconfig"].replace(mount["mountPath"], str(root / mount["mountPath"].lstrip("/")))
    (tmp_path / "kubeconfig").write_text(kubeconfig)
    from collectors.kube.client import make_api_client

    api = make_api_client(str(tmp_path / "kubeconfig"), settings.remediation.writer.context)
    assert api.configuration.host == "https://kubernetes.default.svc"
    assert api.configuration.api_key["BearerToken"] == "Bearer writer-token-value"
    assert api.configuration.ssl_ca_cert.endswith("/etc/gpumem/writer/ca.crt")


def _config_name(objects: list[dict]) -> str:
    (name,) = [o["metadata"]["name"] for o in objects
               if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("gpumem-bot-config-")]
    return name


def _ca_pem() -> str:
    # any PEM text: the client only records the file's path
    return "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_the_alerts_component_places_the_rule_beside_the_bot_and_the_receiver_points_at_it():
    objects = render("read-only", ("alerts",))
    rule = one(objects, "PrometheusRule", "gpumem")
    assert rule["metadata"]["namespace"] == "gpumem"
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and all(r["labels"]["gpumem"] == "triage" for r in alerts)
    receiver_file = DEPLOY / "components" / "alerts" / "alertmanager-receiver.yaml"
    # a file for Alertmanager, not an object kustomize applies
    assert kustomize.load_kustomization(receiver_file.parent)["resources"] == ["prometheusrule.yaml"]
    config = yaml.safe_load(receiver_file.read_text())
    (route,) = [r for r in config["route"]["routes"] if r["receiver"] == "gpumem"]
    assert route["matchers"] == ['gpumem="triage"'] and route["continue"] is True
    (receiver,) = [r for r in config["receivers"] if r["name"] == "gpumem"]
    (hook,) = receiver["webhook_configs"]
    svc = one(objects, "Service", "gpumem-bot")
    (port,) = svc["spec"]["ports"]
    assert hook["url"] == f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{port['port']}/alertmanager"
    assert hook["send_resolved"] is True
    auth = hook["http_config"]["authorization"]
    assert auth["type"] == "Bearer" and auth["credentials_file"] == "/etc/alertmanager/secrets/gpumem-webhook/token"
    # the bot reads the same Secret's key
    env = {e["name"]: e for e in bot_deployment(objects)["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUMEM_WEBHOOK_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "gpumem-webhook"


@pytest.mark.skipif(shutil.which("amtool") is None,
                    reason="amtool is not installed (make system-deps installs prometheus-alertmanager)")
def test_amtool_accepts_the_alertmanager_receiver():
    path = DEPLOY / "components" / "alerts" / "alertmanager-receiver.yaml"
    done = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and "2 receivers" in done.stdout
