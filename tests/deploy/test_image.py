"""The container image, built with `make image` and run: the store migration, the worker and the starter API from
the image against a local stack on the host's loopback (Temporal dev server, reference core and chat, a fresh
PostgreSQL database), a helper started through the API in the container and followed to its outcome; then the
worker and API Deployments of deploy/k8s as written, run by `podman kube play`, serving a helper the same way.

Slow (`make test-all`): the first build takes about a minute. Skipped where no container engine runs, except
where HELPER_TESTS_NEED_CONTAINERS=1 (CI) demands them. One run per machine at a time: the pods and podman secrets
have the manifests' names, which podman keeps machine-wide.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
import yaml
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from temporalio.testing import WorkflowEnvironment

from codec.encryption import new_key
from reference.chat.server import running_chat
from reference.core.script import scripted_task
from reference.core.server import running_core
from tests.conftest import POSTGRES_URL, TEMPORAL_CLI
from tests.deploy.test_manifests import BASE, KUBECTL
from tests.helpers import free_port, fresh_postgres_database, run_bounded
from tools.image import build
from tools.release import release_version

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
USER_ID = "10001"
RESULTS = "/var/lib/helper-runtime/results"  # HELPER_RESULTS_DIR in the image and the ConfigMap
GRACE_S = 30  # terminationGracePeriodSeconds of both Deployments
API_TOKEN = "test-token-" + "x" * 16
Json = dict[str, Any]


def no_engine(reason: str) -> NoReturn:
    """Skip where a container engine or a tool these tests need is missing (a newcomer's machine); fail where they
    must run (CI)."""
    if os.environ.get("HELPER_TESTS_NEED_CONTAINERS") == "1":
        pytest.fail(f"{reason} (HELPER_TESTS_NEED_CONTAINERS=1: these tests must run here)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def engine() -> list[str]:
    try:
        return build.engine()
    except build.ImageError as error:
        no_engine(f"no container engine: {error}")


@pytest.fixture(scope="module")
def image(engine: list[str]) -> str:
    """`make image`, once for the module: the tag it built (helper-runtime:<pyproject's version>)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "image"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=build.BUILD_TIMEOUT_S,
    )
    assert done.returncode == 0, f"make image failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    tag = build.default_tag()
    assert done.stdout.strip().endswith(tag)
    return tag


async def run(engine: list[str], *args: str, timeout: float = 60, check: bool = True) -> str:
    """One engine command, bounded; its standard output."""
    try:
        code, out, err = await run_bounded(*engine, *args, timeout=timeout, env=build.engine_environment())
    except TimeoutError:
        raise AssertionError(f"{' '.join(args[:3])}… did not end within {timeout} s") from None
    if check and code != 0:
        raise AssertionError(f"{' '.join(args)} exited with {code}: {err[-2000:]}")
    return out


async def answers(url: str, timeout: float = 60) -> None:
    """Until GET `url` answers 200; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    last: object = None
    async with httpx.AsyncClient(timeout=3) as http:
        while time.monotonic() < deadline:
            try:
                response = await http.get(url)
                if response.status_code == 200:
                    return
                last = f"{response.status_code} {response.text[:200]}"
            except httpx.HTTPError as error:
                last = repr(error)
            await asyncio.sleep(0.5)
    raise AssertionError(f"{url} did not answer 200 within {timeout} s; last: {last}")


@dataclass
class Local:
    """The local stack on the host's loopback that the containers reach with host networking."""

    temporal: str
    core_url: str
    chat_url: str
    store_url: str
    codec_keys: str
    results: Path  # the host directory mounted as the results volume
    task_queue: str

    def environment(self) -> dict[str, str]:
        return {
            "TEMPORAL_ADDRESS": self.temporal,
            "TEMPORAL_NAMESPACE": "default",
            "HELPER_TASK_QUEUE": self.task_queue,
            "HELPER_STORE_URL": self.store_url,
            "HELPER_CORE_URL": self.core_url,
            "HELPER_CHAT_URL": self.chat_url,
            "HELPER_CODEC_KEYS": self.codec_keys,
            "HELPER_MIGRATE_ON_START": "false",
        }


@pytest.fixture
async def local(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Local]:
    results = tmp_path / "results"
    results.mkdir()
    # The volume belongs to the image's user, as fsGroup (or an NFS export's owner) makes it in a cluster.
    if os.geteuid() == 0:
        os.chown(results, int(USER_ID), int(USER_ID))
    else:
        results.chmod(0o777)
    async with (
        running_core(tmp_path / "core.sqlite3") as core_url,
        running_chat() as chat_url,
        fresh_postgres_database(POSTGRES_URL) as store_url,
    ):
        yield Local(
            temporal=dev_env.client.service_client.config.target_host,
            core_url=core_url,
            chat_url=chat_url,
            store_url=store_url,
            codec_keys=f"test:{new_key()}",
            results=results,
            task_queue=f"image-{uuid.uuid4().hex[:8]}",
        )


async def migrate(engine: list[str], image: str, local: Local) -> None:
    """`python -m store migrate` from the image; the store then has its schema's revision."""
    variables = [arg for name, value in local.environment().items() for arg in ("--env", f"{name}={value}")]
    await run(engine, "run", "--rm", "--network", "host", "--read-only", *variables, image, "python", "-m", "store",
              "migrate", timeout=120)  # fmt: skip
    store = create_async_engine(local.store_url)
    try:
        async with store.connect() as connection:
            revision = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
    finally:
        await store.dispose()
    assert revision


async def start_helper(http: httpx.AsyncClient, helper_id: str, task: str) -> None:
    started = await http.post("/helpers", json={"helper_id": helper_id, "task": task, "model": "scripted"})
    assert started.status_code == 201, started.text


async def row_when(http: httpx.AsyncClient, helper_id: str, field: str, timeout: float) -> Json:
    """The helper's row (`show`) once `field` is set; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    row: Json = {}
    while time.monotonic() < deadline:
        row = (await http.get(f"/helpers/{helper_id}")).json()
        if row.get(field) is not None:
            return row
        await asyncio.sleep(0.5)
    raise AssertionError(f"{helper_id}: no {field} within {timeout} s: {row}")


def owner_api(api: str, token: str | None = None) -> httpx.AsyncClient:
    """An HTTP client of one new owner's routes on the API."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=f"{api}/v1/owners/owner-{uuid.uuid4().hex[:6]}", headers=headers, timeout=15)


async def helper_through_api(api: str, local: Local, token: str | None = None) -> None:
    """Start a helper with the API and wait for its outcome: completed, its text shown by the API and written by
    the worker, as uid 10001, into the results volume."""
    async with owner_api(api, token) as http:
        await start_helper(http, "image-check", scripted_task("Check.", steps=2, step_ms=100, final_text="It runs."))
        row = await row_when(http, "image-check", "outcome_kind", timeout=90)
    assert row["outcome_kind"] == "completed", row
    assert "It runs." in row["full_text"]
    written = local.results / Path(row["result_dir"]).relative_to(RESULTS) / "outcome.md"
    assert "It runs." in written.read_text()
    assert written.stat().st_uid == int(USER_ID)


async def running_helper(api: str) -> None:
    """Start a helper whose one step takes two minutes, and wait until the worker follows it."""
    async with owner_api(api) as http:
        await start_helper(http, "long-one", scripted_task("Take long.", steps=1, step_ms=120_000))
        await row_when(http, "long-one", "follow_started_at", timeout=60)


async def user_of(engine: list[str], container: str) -> str:
    return (await run(engine, "exec", container, "id", "-u")).strip()


async def stop(engine: list[str], container: str) -> tuple[float, int]:
    """SIGTERM with the Deployments' grace, SIGKILL after it (as a kubelet does): seconds taken and exit code."""
    began = time.monotonic()
    await run(engine, "stop", "--time", str(GRACE_S), container, timeout=GRACE_S + 30)
    took = time.monotonic() - began
    code = int((await run(engine, "inspect", "--format", "{{.State.ExitCode}}", container)).strip())
    return took, code


async def test_image_migrates_the_store_and_runs_the_worker_and_the_api_as_its_user(
    engine: list[str], image: str, local: Local
) -> None:
    # The licences listed in the docs are those of the distributions in this image.
    assert await asyncio.to_thread(build.licences, image) == (ROOT / "docs" / "image-licences.md").read_text()
    await migrate(engine, image, local)
    health, metrics, api_port = free_port(), free_port(), free_port()
    name = uuid.uuid4().hex[:8]
    worker, api = f"image-worker-{name}", f"image-api-{name}"
    variables = [arg for key, value in local.environment().items() for arg in ("--env", f"{key}={value}")]
    # What a pod has: a read-only root filesystem, an empty /tmp, the results volume (read-only for the API).
    contained = ["--network", "host", "--read-only", "--tmpfs", "/tmp", *variables]
    if engine[0].endswith("podman"):
        contained.append("--read-only-tmpfs=false")  # podman's default also mounts /run and /var/tmp writable
    try:
        binds = [f"HELPER_HEALTH_BIND=127.0.0.1:{health}", f"HELPER_METRICS_BIND=127.0.0.1:{metrics}"]
        volume = f"{local.results}:{RESULTS}"
        await run(engine, "run", "--detach", "--name", worker, *contained, "--volume", volume,
                  "--env", binds[0], "--env", binds[1], image)  # fmt: skip
        serve = ["helper-starter", "serve", "--bind", f"127.0.0.1:{api_port}"]
        await run(engine, "run", "--detach", "--name", api, *contained, "--volume", f"{volume}:ro", image, *serve)
        # The probes' endpoints (deploy/k8s): /livez and /readyz on the worker's health port and on the API's.
        for url in (f"http://127.0.0.1:{health}/livez", f"http://127.0.0.1:{health}/readyz"):
            await answers(url)
        for url in (f"http://127.0.0.1:{api_port}/livez", f"http://127.0.0.1:{api_port}/readyz"):
            await answers(url)
        await answers(f"http://127.0.0.1:{metrics}/metrics")

        assert await user_of(engine, worker) == USER_ID
        assert await user_of(engine, api) == USER_ID
        await helper_through_api(f"http://127.0.0.1:{api_port}", local)

        # No compiler and no pip in the image: only the virtual environment's runtime.
        tools = "for tool in gcc cc pip pip3; do command -v $tool; done; true"
        assert (await run(engine, "exec", worker, "sh", "-c", tools)).strip() == ""
        # Nothing written outside the results volume: the root is read-only, and /tmp stayed empty.
        assert (await run(engine, "exec", worker, "find", "/tmp", "-mindepth", "1")).strip() == ""
        assert (await run(engine, "exec", api, "find", "/tmp", "-mindepth", "1")).strip() == ""

        # SIGTERM while a helper runs: the worker ends its follow attempt at once (Temporal hands it on) and exits.
        await running_helper(f"http://127.0.0.1:{api_port}")
        for container in (worker, api):
            took, code = await stop(engine, container)
            assert code == 0 and took < GRACE_S, f"{container}: exit {code} after {took:.1f} s (grace {GRACE_S} s)"
    finally:
        await run(engine, "rm", "--force", worker, api, timeout=GRACE_S + 30, check=False)


# --- podman kube play ------------------------------------------------------------------------------------------------


def rendered() -> list[Json]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(BASE)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def pick(documents: list[Json], kind: str, name: str) -> Json:
    [found] = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def example_secrets() -> dict[str, Json]:
    """deploy/k8s/secret.example.yaml's Secrets by name."""
    documents = yaml.safe_load_all((BASE / "secret.example.yaml").read_text())
    return {doc["metadata"]["name"]: doc for doc in documents if doc}


@dataclass
class Played:
    """What the test gave the pods: the worker's health port, the API's port, each container's probe paths."""

    worker_health: int
    api_port: int
    probe_paths: dict[str, list[str]]


def for_podman(documents: list[Json], image: str, local: Local) -> tuple[list[Json], Played]:
    """The worker and API Deployments with their ConfigMap, changed only where a cluster would provide what this
    machine does not: the image's local name, the test's addresses, host networking (ports chosen free), one API
    replica (two would share the host's port), the results volume as a host directory instead of the claim."""
    config = pick(documents, "ConfigMap", "helper-runtime-config")
    worker = pick(documents, "Deployment", "helper-worker")
    api = pick(documents, "Deployment", "helper-api")
    assert {d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] for d in (worker, api)} == {GRACE_S}
    health, metrics, api_port = free_port(), free_port(), free_port()
    config["data"].update(
        {
            **{key: value for key, value in local.environment().items() if key not in secret_keys()},
            "HELPER_HEALTH_BIND": f"127.0.0.1:{health}",
            "HELPER_METRICS_BIND": f"127.0.0.1:{metrics}",
        }
    )
    probe_paths: dict[str, list[str]] = {}
    for deployment in (worker, api):
        pod = deployment["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        for container in pod["containers"]:
            container["image"] = f"localhost/{image}"
            # podman 4.3 refuses port declarations on the host's network ("PortMappings can only be used with
            # Bridge or slirp4netns networking"); the probes' paths are checked over HTTP instead.
            container.pop("ports")
            probe_paths[container["name"]] = [
                container[probe]["httpGet"]["path"] for probe in ("livenessProbe", "readinessProbe")
            ]
        for volume in pod["volumes"]:
            if volume["name"] == "results":
                volume.pop("persistentVolumeClaim")
                volume["hostPath"] = {"path": str(local.results), "type": "Directory"}
    api["spec"]["replicas"] = 1
    [serving] = api["spec"]["template"]["spec"]["containers"]
    assert serving["command"][-1] == "0.0.0.0:8340"
    serving["command"][-1] = f"127.0.0.1:{api_port}"
    return [config, worker, api], Played(health, api_port, probe_paths)


def secret_keys() -> set[str]:
    return {key for secret in example_secrets().values() for key in secret["stringData"]}


async def create_secrets(engine: list[str], local: Local, tmp_path: Path, created: list[str]) -> None:
    """The Secrets the Deployments name, made from secret.example.yaml with the test's values, as podman secrets
    (podman 4.3 reads a secret's data as a JSON object of base64 values; a Secret's YAML it does not take)."""
    values = {
        "helper-store": {"HELPER_STORE_URL": local.store_url},
        "helper-store-reader": {"HELPER_STORE_URL": local.store_url},
        "helper-codec-keys": {"HELPER_CODEC_KEYS": local.codec_keys, "HELPER_CODEC_KEY_ID": "test"},
        "helper-api-token": {"HELPER_API_TOKEN": API_TOKEN},
        "helper-temporal-tls": {},  # optional in the manifests; podman 4.3 requires it to exist
    }
    examples = example_secrets()
    for name, data in values.items():
        if name != "helper-temporal-tls":  # certificate files, made from files (secret.example.yaml says how)
            assert set(examples[name]["stringData"]) == set(data), f"{name}: keys differ from the example"
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({key: base64.b64encode(value.encode()).decode() for key, value in data.items()}))
        await run(engine, "secret", "rm", name, check=False)
        await run(engine, "secret", "create", name, str(path))
        created.append(name)


async def container_of(engine: list[str], deployment: str, name: str) -> str:
    """The container podman made for a Deployment's container (`<deployment>-pod-<n>-<name>`)."""
    names = (await run(engine, "ps", "--all", "--format", "{{.Names}}")).split()
    [found] = [n for n in names if n.startswith(f"{deployment}-pod") and n.endswith(f"-{name}")]
    return found


async def test_the_deployments_run_with_podman_kube_play_and_serve_a_helper(
    engine: list[str], image: str, local: Local, tmp_path: Path
) -> None:
    if not engine[0].endswith("podman"):
        no_engine("podman kube play needs podman")
    if KUBECTL is None:
        no_engine("kubectl is not installed (it renders deploy/k8s)")
    documents, played = for_podman(rendered(), image, local)
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    # The migration Job (deploy/k8s/migrate) is not a kind podman 4.3 plays: its command, run from the image.
    await migrate(engine, image, local)
    secrets: list[str] = []
    try:
        await create_secrets(engine, local, tmp_path, secrets)
        await run(engine, "kube", "play", str(manifest), timeout=180)
        worker = await container_of(engine, "helper-worker", "worker")
        api = await container_of(engine, "helper-api", "api")

        # What the probes ask, on the ports the pods listen on.
        for container, port in (("worker", played.worker_health), ("api", played.api_port)):
            for path in played.probe_paths[container]:
                await answers(f"http://127.0.0.1:{port}{path}")
        # The release procedure (docs/operations.md, "Releases"): the build polls, then becomes current.
        await make_current(local.temporal)
        await helper_through_api(f"http://127.0.0.1:{played.api_port}", local, token=API_TOKEN)

        # The pod and container security contexts, as podman applied them.
        for container in (worker, api):
            assert await user_of(engine, container) == USER_ID
            facts = json.loads(await run(engine, "inspect", container))[0]
            assert facts["HostConfig"]["ReadonlyRootfs"] is True
            assert "no-new-privileges" in facts["HostConfig"]["SecurityOpt"]
            status = await run(engine, "exec", container, "cat", "/proc/1/status")
            assert "CapEff:\t0000000000000000" in status
    finally:
        await run(engine, "kube", "play", "--down", str(manifest), timeout=GRACE_S * 2 + 60, check=False)
        if secrets:
            await run(engine, "secret", "rm", *secrets, check=False)
    assert "helper-worker" not in await run(engine, "pod", "ps", "--format", "{{.Name}}")


async def make_current(temporal: str, timeout: float = 60) -> None:
    """`temporal worker deployment set-current-version` for this build, retried until the server has seen it poll."""
    command = [str(TEMPORAL_CLI), "worker", "deployment", "set-current-version", "--address", temporal,
               "--deployment-name", "helper-runtime", "--build-id", release_version(), "--yes"]  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        process = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        if process.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"set-current-version failed for {timeout} s: {out.decode()[-500:]}")
        await asyncio.sleep(1)
