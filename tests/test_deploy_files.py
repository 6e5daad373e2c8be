"""The deploy files, read as Kubernetes and compose would read them (no cluster here).

What an operator applies must mean what the docs say: every variable a manifest sets is one
Companion reads, the Discord StatefulSet's pods run every shard exactly once and no Slack,
and the Services reach only the pods meant for them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from urllib.parse import urlsplit

import pytest
import yaml
from aiohttp import web

from bot.health import add_health_routes, serving
from bot.settings import Settings
from tests.conftest import ROOT
from tests.test_docs import settings_read
from tests.test_run import free_port

K8S = ROOT / "deploy" / "k8s"
FOR_POSTGRES = {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}  # postgres.yaml's own


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def one(name: str, kind: str) -> dict:
    (found,) = [d for d in documents(name) if d["kind"] == kind]
    return found


def container(workload: dict) -> dict:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def env_of(workload: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container(workload).get("env", [])}


def test_every_variable_the_manifests_set_is_one_companion_reads():
    known = settings_read() | {"DATABASE_URL"}
    config = one("configmap.yaml", "ConfigMap")["data"]
    secret = one("secret.example.yaml", "Secret")["stringData"]
    derived = {"POD_INDEX"}  # the StatefulSet's ordinal, used inside COMPANION_DISCORD_SHARDS
    pods = set(env_of(one("deployment.yaml", "Deployment")))
    pods |= set(env_of(one("discord-shards.yaml", "StatefulSet"))) - derived
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    bot = set(compose["services"]["bot"].get("environment", {}))
    unknown = sorted((set(config) | (set(secret) - FOR_POSTGRES) | pods | bot) - known)
    assert unknown == [], f"the deploy files set variables Companion never reads: {unknown}"


def test_the_discord_statefulset_runs_every_shard_once_and_no_slack():
    shards = one("discord-shards.yaml", "StatefulSet")
    replicas = shards["spec"]["replicas"]
    env = env_of(shards)
    ordinal = env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ordinal == "metadata.labels['apps.kubernetes.io/pod-index']"
    template = env["COMPANION_DISCORD_SHARDS"]["value"]
    assert "$(POD_INDEX)" in template  # Kubernetes expands $(NAME) of an earlier variable

    # A Secret with every Slack mode filled in, as one shared with the Slack Deployment is.
    secret = {k: "x" for k in one("secret.example.yaml", "Secret")["stringData"]}
    ran: list[int] = []
    for pod in range(replicas):
        pod_env = {**secret, **{k: e.get("value", "") for k, e in env.items()}}
        pod_env["COMPANION_DISCORD_SHARDS"] = template.replace("$(POD_INDEX)", str(pod))
        settings = Settings.from_env(pod_env)
        shards_of_pod = settings.discord_shards
        assert shards_of_pod is not None and shards_of_pod.ids is not None
        assert shards_of_pod.count == replicas, "keep replicas equal to the shard count"
        ran.extend(shards_of_pod.ids)
        assert not settings.slack, f"pod {pod} would also serve Slack"
        assert settings.discord_token
    assert sorted(ran) == list(range(replicas))


@pytest.mark.parametrize("service", ["service.yaml", "discord-shards.yaml"])
def test_each_service_reaches_only_its_own_pods(service):
    selector = one(service, "Service")["spec"]["selector"]
    workloads = [one("deployment.yaml", "Deployment"), one("discord-shards.yaml", "StatefulSet")]
    workloads += [one("postgres.yaml", "StatefulSet")]
    reached = [
        w["metadata"]["name"]
        for w in workloads
        if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert len(reached) == 1, f"{service} selects the pods of {reached}"
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_probes_and_ports_are_the_ones_companion_serves():
    data = one("configmap.yaml", "ConfigMap")["data"]
    port, ops = int(data["COMPANION_HTTP_PORT"]), int(data["COMPANION_OPS_PORT"])
    assert Settings.from_env({"OPENAI_API_KEY": "x"}).http_port == port  # compose's default
    assert Settings.from_env(data | {"OPENAI_API_KEY": "x"}).ops_public is False
    public = add_health_routes(web.Application(), health=None, details=False)  # type: ignore[arg-type]
    served = {route.resource.canonical for route in public.router.routes() if route.resource}
    assert "/metrics" not in served  # issue 27, finding 9: only on the ops port
    for workload in (
        one("deployment.yaml", "Deployment"),
        one("discord-shards.yaml", "StatefulSet"),
    ):
        spec = container(workload)
        assert {p["name"]: p["containerPort"] for p in spec["ports"]} == {"http": port, "ops": ops}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert spec[probe]["httpGet"]["path"] in served, f"{probe} asks for a page not served"


# --- the memory inspector, reached as configured (issue 31: links went to localhost) ---------


def interpolate(text: str, env: dict[str, str]) -> str:
    """compose's `${VAR}`, `${VAR:-default}` and `${VAR:?message}`, from `env`."""

    def value(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3) or ""
        got = env.get(name, "")
        if op == ":-" and not got:
            return rest
        assert op != ":?" or got, f"compose would stop: {rest}"
        return got

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", value, text)


def env_example() -> dict[str, str]:
    pairs = [
        line.split("=", 1)
        for line in (ROOT / "deploy" / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    return {key: value for key, value in pairs}


def compose(**env: str) -> dict:
    """compose.yaml as `docker compose` reads it with deploy/.env = .env.example + `env`."""
    text = (ROOT / "deploy" / "compose.yaml").read_text()
    return yaml.safe_load(interpolate(text, {**env_example(), **env}))


def published(service: dict, container_port: int) -> tuple[str, int]:
    """(host address, host port) that a service's container port is published on."""
    for entry in service.get("ports", []):
        parts = str(entry).split(":")
        host, outside, inside = (["0.0.0.0"] + parts)[-3:] if len(parts) < 3 else parts
        if int(inside) == container_port:
            return host, int(outside)
    raise AssertionError(f"container port {container_port} is not published")


def test_compose_links_reach_the_inspector_with_and_without_the_https_proxy():
    port = int(env_example()["COMPANION_HTTP_PORT"])
    plain = compose()  # by the book, no domain yet: links work on the bot's own host
    url = urlsplit(Settings.from_env(env_of_compose(plain)).base_url)
    assert (url.scheme, url.hostname) == ("http", "localhost")
    assert published(plain["services"]["bot"], port) == ("127.0.0.1", url.port)

    public = "https://companion.example.org"
    served = compose(COMPANION_PUBLIC_URL=public)
    assert Settings.from_env(env_of_compose(served)).base_url == public
    proxy = served["services"]["proxy"]
    assert proxy["profiles"] == ["https"]
    command = proxy["command"].split()
    assert command[command.index("--from") + 1] == public  # Caddy serves that address
    assert command[command.index("--to") + 1] == f"bot:{port}"  # ... from the bot's port
    assert {published(proxy, 443)[1], published(proxy, 80)[1]} == {443, 80}


def env_of_compose(document: dict) -> dict[str, str]:
    bot = document["services"]["bot"]
    return {**env_example(), **{k: str(v) for k, v in bot["environment"].items()}}


def test_kubernetes_routes_the_public_url_to_the_inspector():
    resources = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert {"ingress.yaml", "service.yaml", "deployment.yaml"} <= set(resources)
    config = one("configmap.yaml", "ConfigMap")["data"]
    public = urlsplit(Settings.from_env(config).base_url)
    assert public.scheme == "https" and public.hostname, "links must go to an https address"

    ingress = one("ingress.yaml", "Ingress")["spec"]
    assert any(public.hostname in tls["hosts"] for tls in ingress["tls"])
    (rule,) = [r for r in ingress["rules"] if r["host"] == public.hostname]
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")  # /signin, /members/...
    backend = path["backend"]["service"]
    service = one("service.yaml", "Service")
    assert backend["name"] == service["metadata"]["name"]
    (service_port,) = [p for p in service["spec"]["ports"] if p["name"] == backend["port"]["name"]]
    ports = {
        p["name"]: p["containerPort"]
        for p in container(one("deployment.yaml", "Deployment"))["ports"]
    }
    assert ports[service_port["targetPort"]] == int(config["COMPANION_HTTP_PORT"])


def healthcheck_commands() -> list[list[str]]:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [x for x in dockerfile.splitlines() if x.startswith("HEALTHCHECK")]
    image = json.loads(line.split(" CMD ", 1)[1])
    bot = compose()["services"]["bot"]["healthcheck"]["test"]
    assert bot[0] == "CMD"
    return [image, bot[1:]]


async def test_the_healthchecks_pass_while_it_serves_and_fail_when_it_does_not():
    port = free_port()
    app = add_health_routes(web.Application(), health=None)  # type: ignore[arg-type]
    env = {**os.environ, "COMPANION_HTTP_PORT": str(port)}

    async def check(command: list[str]) -> int:
        assert command[0] == "python"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *command[1:], env=env, stderr=asyncio.subprocess.DEVNULL
        )
        return await proc.wait()

    for command in healthcheck_commands():
        assert await check(command) != 0, "nothing listens yet"
        async with serving(app, "127.0.0.1", port):
            assert await check(command) == 0


def test_every_deployment_migrates_before_the_bot_starts():
    """`companion migrate` runs to its end before `run` (which refuses a revision that
    rewrites tables): compose's bot waits for the migrate service, each pod for its init
    container, with the same image and settings."""
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]
    assert compose["migrate"]["command"] == ["migrate"]
    assert compose["migrate"]["image"] == compose["bot"]["image"]
    assert (
        compose["migrate"]["environment"]["DATABASE_URL"]
        == (compose["bot"]["environment"]["DATABASE_URL"])
    )
    assert compose["bot"]["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"
    }
    for name, kind in (("deployment.yaml", "Deployment"), ("discord-shards.yaml", "StatefulSet")):
        pod = one(name, kind)["spec"]["template"]["spec"]
        (init,) = pod["initContainers"]
        assert init["args"] == ["migrate"] and init["image"] == container(one(name, kind))["image"]
        assert init["envFrom"] == container(one(name, kind))["envFrom"]


def test_the_image_makes_the_int8_model_where_its_settings_look(tmp_path, monkeypatch):
    """Quantizing the built-in model takes about 350 MB more than running it: a pod under its
    512 MiB limit must find it made, in the image, where COMPANION_MODELS_DIR points."""
    import subprocess
    from pathlib import Path

    from core import local_embedder

    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", "")
    folder = re.findall(r"COMPANION_MODELS_DIR=(\S+)", dockerfile)
    assert len(set(folder)) == 1, folder
    (run,) = [x for x in dockerfile.splitlines() if x.startswith("RUN ") and "Embedder" in x]
    code = re.search(r'-c "(.*?)"', run).group(1)  # type: ignore[union-attr]
    assert f"cache=Path('{folder[0]}')" in code
    made = subprocess.run(
        [sys.executable, "-c", code.replace(folder[0], str(tmp_path))], cwd=ROOT, check=False
    )
    assert made.returncode == 0

    def refuse(model):
        raise AssertionError("made again at the pod's start")

    monkeypatch.setattr(local_embedder, "_quantize", refuse)
    models = Settings.from_env({"COMPANION_MODELS_DIR": str(tmp_path)}).models_dir
    assert models == tmp_path
    assert len(local_embedder.LocalEmbedder(cache=models).embed_now(["ok"])[0]) == 384
    assert Settings.from_env({"COMPANION_DATA_DIR": "/d"}).models_dir == Path("/d/models")
    manifests = [
        p for p in (ROOT / "deploy").rglob("*.yaml") if "COMPANION_MODELS_DIR" in p.read_text()
    ]
    assert manifests == [], "the image's own setting stays"
