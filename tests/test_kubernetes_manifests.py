"""The Kubernetes manifests (``deploy/kubernetes/``) and the container build file
(``deploy/Dockerfile``): every resource against the official Kubernetes schemas (offline:
kubernetes-validate ships the JSON schemas of each release), and the references between them,
the twin's config and its code (probe ports and paths, metrics port, Secret keys, grace period).

There is no cluster, image registry or Docker daemon here: nothing is applied or built
(docs/kubernetes.md, "What was not run here"). The ConfigMap's Hydra overrides are composed with
the real configs and validated by the solver's own config layer.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from solver.twin.health import LIVE_PATH, READY_PATH
from tests.solver_cli import ROOT

kubernetes_validate = pytest.importorskip("kubernetes_validate")

MANIFESTS = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
# the oldest Kubernetes release still maintained when the manifests were written, and the newest
# the validator ships: every field used must exist in both
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
# s the grace period must leave after the longest chunk (twin.health.deadline) for the
# checkpoint save, run.json and the process's exit: measured at a few s for this case
# (tests/test_twin_health.py); 30 s leave room for a larger state on slower storage
SAVE_MARGIN_S = 30.0
SECRET_DIR = "/etc/solver/mqtt"


def _resources(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _all() -> dict[str, dict]:
    """{kind: resource} of every manifest but the kustomization (one resource per kind)."""
    out = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in _resources(path):
            if doc["kind"] != "Kustomization":
                assert doc["kind"] not in out, f"two {doc['kind']} resources"
                out[doc["kind"]] = doc
    return out


def _validate(resource: dict) -> None:
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(resource, version, strict=True)


def _container(statefulset: dict) -> dict:
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return container


def _twin_overrides(resources: dict) -> dict:
    """The ConfigMap's Hydra config file, as data."""
    (text,) = resources["ConfigMap"]["data"].values()
    return yaml.safe_load(text)


def test_every_manifest_is_valid_against_the_kubernetes_schemas():
    resources = _all()
    assert set(resources) == {"ConfigMap", "Secret", "Service", "StatefulSet"}
    for resource in resources.values():
        _validate(resource)  # raises kubernetes_validate.ValidationError naming the field
    (kustomization,) = _resources(MANIFESTS / "kustomization.yaml")
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    # the Secret is an example to create from files, never applied with its placeholders
    assert listed == on_disk - {"secret.example.yaml"}
    kubectl = shutil.which("kubectl")
    if kubectl is not None:  # kustomize renders offline; its output must validate too
        rendered = subprocess.run([kubectl, "kustomize", str(MANIFESTS)], capture_output=True,
                                  text=True, timeout=60, check=True).stdout  # fmt: skip
        docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
        assert sorted(d["kind"] for d in docs) == ["ConfigMap", "Service", "StatefulSet"]
        for doc in docs:
            _validate(doc)


@pytest.mark.parametrize(
    "breakage",
    ["misspelled_field", "wrong_type", "missing_required", "bad_probe"],
)
def test_the_schema_check_fails_on_a_broken_manifest(breakage):
    statefulset = copy.deepcopy(_all()["StatefulSet"])
    container = _container(statefulset)
    if breakage == "misspelled_field":
        container["livenessprobe"] = container.pop("livenessProbe")
    elif breakage == "wrong_type":
        container["ports"][0]["containerPort"] = "9108/tcp"
    elif breakage == "missing_required":
        del statefulset["spec"]["selector"]
    else:
        container["readinessProbe"]["httpGet"]["url"] = container["readinessProbe"]["httpGet"].pop(
            "path"
        )
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(statefulset)


def test_probes_metrics_and_secrets_match_the_twin_config():
    resources = _all()
    statefulset, service = resources["StatefulSet"], resources["Service"]
    pod = statefulset["spec"]["template"]
    container = _container(statefulset)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    twin = _twin_overrides(resources)["twin"]
    health, mqtt = twin["health"], twin["mqtt"]

    # probes: the health server's port and paths
    assert ports["health"] == health["port"]
    for name, path in (("startupProbe", LIVE_PATH), ("livenessProbe", LIVE_PATH),
                       ("readinessProbe", READY_PATH)):  # fmt: skip
        probe = container[name]["httpGet"]
        assert probe["path"] == path, name
        assert ports.get(probe["port"], probe["port"]) == health["port"], name
    # in the pod network, configured explicitly (the code's default is 127.0.0.1)
    assert health["address"] == twin["metrics_address"] == "0.0.0.0"

    # metrics: annotations of the pod and the Service, the container port, the config
    for notes in (pod["metadata"]["annotations"], service["metadata"]["annotations"]):
        assert notes["prometheus.io/scrape"] == "true"
        assert int(notes["prometheus.io/port"]) == twin["metrics_port"] == ports["metrics"]
        assert notes["prometheus.io/path"] == "/metrics"
    targets = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
    assert targets == {"metrics": "metrics", "health": "health"}
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]

    # SIGTERM: the grace period covers the longest chunk plus the save
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace >= health["deadline"] + SAVE_MARGIN_S

    # the Secret: mounted where the config reads its files, with every key the config names
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    secret_volume = next(v for v in volumes.values() if "secret" in v)
    assert secret_volume["secret"]["secretName"] == resources["Secret"]["metadata"]["name"]
    assert mounts[secret_volume["name"]] == SECRET_DIR
    files = [v for k, v in mqtt.items() if k.endswith("_file") and v is not None]
    assert files and all(f.startswith(SECRET_DIR + "/") for f in files), files
    keys = set(resources["Secret"]["stringData"])
    assert {Path(f).name for f in files} <= keys
    assert mqtt["tls"] is True and mqtt.get("password_env") is None

    # no secret value anywhere but the Secret: not in args, env, labels or annotations
    text = yaml.safe_dump([r for k, r in resources.items() if k != "Secret"])
    for value in resources["Secret"]["stringData"].values():
        for line in value.splitlines():
            if "REPLACE" in line:
                assert line.strip() not in text
    assert "env" not in container or all("value" not in e for e in container["env"])

    # the run directory and checkpoints on the claimed volume
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    data = mounts[claim["metadata"]["name"]]
    run_dir = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("hydra.run.dir="))
    assert run_dir.startswith(data + "/")


def test_the_config_map_composes_into_a_valid_twin_config(tmp_path):
    """The StatefulSet's arguments with the ConfigMap mounted as its config group: Hydra composes
    them with the real configs and the solver's config layer accepts the result."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from solver.app import CONFIG_DIR
    from solver.config import load

    resources = _all()
    container = _container(resources["StatefulSet"])
    args = container["args"]
    (searchpath,) = [a for a in args if a.startswith("hydra.searchpath=")]
    (root,) = re.fullmatch(r"hydra\.searchpath=\[file://(/[^\]]+)\]", searchpath).groups()
    (group_arg,) = [a for a in args if a.startswith("+")]
    group, option = group_arg[1:].split("=")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volume = next(v for v in resources["StatefulSet"]["spec"]["template"]["spec"]["volumes"]
                  if "configMap" in v)  # fmt: skip
    assert volume["configMap"]["name"] == resources["ConfigMap"]["metadata"]["name"]
    assert mounts[volume["name"]] == f"{root}/{group}"
    (item,) = volume["configMap"]["items"]
    assert item["path"] == f"{option}.yaml"
    # the ConfigMap's file where the pod would see it, under a local search path
    (tmp_path / group).mkdir()
    (tmp_path / group / item["path"]).write_text(resources["ConfigMap"]["data"][item["key"]])
    local = [a for a in args if not a.startswith(("hydra.searchpath=", "hydra.run.dir="))]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="config",
                          overrides=[*local, f"hydra.searchpath=[file://{tmp_path}]"])  # fmt: skip
    finally:
        GlobalHydra.instance().clear()
    config = load(cfg)
    twin = config.twin
    assert twin.mode == "mqtt" and twin.service
    assert twin.health.port == 8081 and twin.health.address == "0.0.0.0"
    assert twin.metrics_port == 9108 and twin.metrics_address == "0.0.0.0"
    assert twin.mqtt.tls and twin.mqtt.password_file == f"{SECRET_DIR}/password"
    assert config.checkpoint.enabled and config.checkpoint.resume == "auto"


def test_the_dockerfile_builds_in_two_stages_and_runs_as_the_manifests_user():
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\w+)", text, flags=re.MULTILINE)
    assert [name for _, name in stages] == ["build", "runtime"]
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text  # within requires-python
    build, runtime = re.split(r"^FROM .* AS runtime$", text, flags=re.MULTILINE)
    assert "pip wheel --no-deps" in build and "COPY pyproject.toml" in build
    assert "COPY --from=build /opt/venv /opt/venv" in runtime
    (user,) = re.findall(r"^USER\s+(\d+):(\d+)$", runtime, flags=re.MULTILINE)
    pod = _all()["StatefulSet"]["spec"]["template"]["spec"]["securityContext"]
    assert int(user[0]) == pod["runAsUser"] != 0 and int(user[1]) == pod["runAsGroup"]
    assert pod["runAsNonRoot"] is True
    # exec form under tini: SIGTERM reaches the solver, which checkpoints and exits 0
    (entry,) = re.findall(r"^ENTRYPOINT (\[.*\])$", runtime, flags=re.MULTILINE)
    assert yaml.safe_load(entry) == ["/usr/bin/tini", "--", "python", "-m", "solver"]
    exposed = {int(p) for p in re.findall(r"^EXPOSE (.*)$", runtime, flags=re.MULTILINE)[0].split()}
    ports = {p["containerPort"] for p in _container(_all()["StatefulSet"])["ports"]}
    assert exposed == ports
    ignored = (ROOT / ".dockerignore").read_text().split()
    for needed in ("pyproject.toml", "README.md", "solver", "kernels", "configs"):
        assert needed not in ignored
