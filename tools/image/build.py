"""Build the helper runtime image (`make image`): deploy/Dockerfile, tagged helper-runtime:<pyproject's version>.

The engine: docker when a docker engine answers (`docker info`; a docker client alone is not enough), else podman,
run as containers.conf beside this file says, with runc and the cgroupfs manager where there is no systemd.
The base: python:3.11-slim when a registry serves it, else Debian bookworm made once with debootstrap from the
mirror apt already uses and imported as localhost/debian-base:bookworm (reused while it exists); the Dockerfile
installs Python from apt on it. `--base python|debian` chooses instead.

The package index may sit behind a TLS-intercepting proxy whose certificate only the host's CA bundle holds: the
build gets that bundle as the secret `ca`, which never lands in a layer.

    python -m tools.image.build [--base auto|python|debian] [--tag NAME:TAG]
    python -m tools.image.build licences     # the Python distributions in the image and their licences
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

from tools.release import release_version

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PYTHON_BASE = "docker.io/library/python:3.11-slim"
DEBIAN_BASE = "localhost/debian-base:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Bounds: an engine that does not answer its `info`, a registry that does not answer a pull, a whole build.
INFO_TIMEOUT_S = 30
PULL_TIMEOUT_S = 300
DEBOOTSTRAP_TIMEOUT_S = 900
BUILD_TIMEOUT_S = 1800


class ImageError(RuntimeError):
    pass


def default_tag() -> str:
    return f"helper-runtime:{release_version()}"


def engine_environment() -> dict[str, str]:
    """The environment to run the engine in: podman reads CONTAINERS_CONF (this directory's, unless set); docker
    builds with BuildKit (for the build secret)."""
    return {"CONTAINERS_CONF": str(HERE / "containers.conf"), "DOCKER_BUILDKIT": "1", **os.environ}


def _answers(command: list[str]) -> bool:
    try:
        done = subprocess.run(
            command, capture_output=True, timeout=INFO_TIMEOUT_S, env=engine_environment(), check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def podman_command() -> list[str]:
    """podman with the settings this machine kind needs: runc (crun refuses hybrid cgroups), and cgroupfs where
    no systemd runs."""
    podman = shutil.which("podman")
    if podman is None:
        raise ImageError("podman is not installed")
    command = [podman]
    runc = shutil.which("runc")
    if runc is not None:
        command += ["--runtime", runc]
    if not Path("/run/systemd/system").is_dir():
        command += ["--cgroup-manager", "cgroupfs"]
    return command


def engine() -> list[str]:
    """The container engine's command line: docker if its engine answers, else podman if it runs containers."""
    docker = shutil.which("docker")
    if docker is not None and _answers([docker, "info"]):
        return [docker]
    if shutil.which("podman") is not None and _answers([*podman_command(), "info"]):
        return podman_command()
    raise ImageError("no container engine answers: neither `docker info` nor `podman info` succeeds")


def run(command: list[str], timeout: float, *, stdin: IO[bytes] | None = None, quiet: bool = False) -> None:
    """One step of the build, shown as it runs; raises CalledProcessError or TimeoutExpired."""
    print("+", " ".join(command), flush=True)
    output = subprocess.DEVNULL if quiet else None
    subprocess.run(
        command, timeout=timeout, env=engine_environment(), check=True, stdin=stdin, stdout=output, stderr=output
    )


def image_exists(command: list[str], name: str) -> bool:
    done = subprocess.run(
        [*command, "image", "inspect", name],
        capture_output=True,
        timeout=INFO_TIMEOUT_S,
        env=engine_environment(),
        check=False,
    )
    return done.returncode == 0


def debian_mirror() -> str:
    """The Debian mirror apt uses on this host (deb822 or one-line sources), else deb.debian.org."""
    if mirror := os.environ.get("DEBIAN_MIRROR"):
        return mirror
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for stanza in sources.read_text().split("\n\n"):
            if re.search(r"^Suites:.*\bbookworm\b", stanza, re.M) and (
                found := re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            ):
                return found.group(1)
    listed = Path("/etc/apt/sources.list")
    one_line = re.compile(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", re.M)
    if listed.is_file() and (found := one_line.search(listed.read_text())):
        return found.group(1)
    return DEFAULT_MIRROR


def debian_base(command: list[str]) -> str:
    """localhost/debian-base:bookworm, made with debootstrap the first time and reused after."""
    if image_exists(command, DEBIAN_BASE):
        return DEBIAN_BASE
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageError(f"no registry serves {PYTHON_BASE} and debootstrap is not installed")
    with tempfile.TemporaryDirectory(prefix="debian-base-") as rootfs:
        run([debootstrap, "--variant=minbase", "bookworm", rootfs, debian_mirror()], DEBOOTSTRAP_TIMEOUT_S)
        # debootstrap leaves the packages it installed in apt's cache: about 40 MB no layer needs.
        tar = subprocess.Popen(
            ["tar", "-C", rootfs, "--exclude=./var/cache/apt/archives/*.deb", "-c", "."], stdout=subprocess.PIPE
        )
        try:
            imported = [*command, "import", "-", DEBIAN_BASE]
            run(imported, DEBOOTSTRAP_TIMEOUT_S, stdin=tar.stdout, quiet=True)
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(timeout=60)
    return DEBIAN_BASE


def python_base(command: list[str]) -> str | None:
    """python:3.11-slim if present or a registry serves it; None when none does."""
    if image_exists(command, PYTHON_BASE):
        return PYTHON_BASE
    try:
        run([*command, "pull", PYTHON_BASE], PULL_TIMEOUT_S, quiet=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        print(f"no registry serves {PYTHON_BASE}: building on Debian bookworm made with debootstrap", flush=True)
        return None
    return PYTHON_BASE


def ca_bundle() -> Path | None:
    """The CA bundle pip trusts on this host: PIP_CERT, else OpenSSL's default file."""
    for candidate in (os.environ.get("PIP_CERT"), ssl.get_default_verify_paths().cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def build(base: str = "auto", tag: str | None = None) -> str:
    """Build the image; returns its tag."""
    command = engine()
    tag = tag or default_tag()
    base_image = None if base == "debian" else python_base(command)
    if base_image is None:
        if base == "python":
            raise ImageError(f"no registry serves {PYTHON_BASE}")
        base_image = debian_base(command)
    build = [*command, "build", "--file", str(DOCKERFILE), "--tag", tag, "--build-arg", f"BASE_IMAGE={base_image}"]
    if command[0].endswith("podman"):
        build += ["--network", "host"]  # the package index and the Debian mirror through the host's own routes
    if (bundle := ca_bundle()) is not None:
        build += ["--secret", f"id=ca,src={bundle}"]
    run([*build, str(ROOT)], BUILD_TIMEOUT_S)
    return tag


LICENCES_HEADER = """# Licences of the Python distributions in the image

Every distribution in the image's virtual environment but helper-runtime itself, generated from the built image by
`python -m tools.image.build licences > docs/image-licences.md`; tests/deploy/test_image.py fails when this file
and the image differ. The licence shown is the distribution's License-Expression, else its licence classifiers,
else the first line of its License field. The interpreter and the system files come from the base image
([operations](operations.md#the-image)).

"""
LICENCES = """
import importlib.metadata as m
rows = []
for d in m.distributions():
    meta = d.metadata
    if meta["Name"] == "helper-runtime":
        continue
    classifiers = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    free_text = (meta.get("License") or "").strip().splitlines()
    licence = meta.get("License-Expression") or "; ".join(classifiers) or (free_text[0][:60] if free_text else "")
    rows.append((meta["Name"], d.version, licence or "UNKNOWN"))
print("| Distribution | Version | Licence |")
print("|---|---|---|")
for name, ver, licence in sorted(rows, key=lambda r: r[0].lower()):
    print(f"| {name} | {ver} | {licence} |")
"""


def licences(tag: str | None = None) -> str:
    """The Python distributions installed in the image and their licences: docs/image-licences.md's text."""
    command = [*engine(), "run", "--rm", "--network", "none", tag or default_tag(), "python", "-c", LICENCES]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=engine_environment(), check=True)
    return LICENCES_HEADER + done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.image.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", nargs="?", choices=["build", "licences"], default="build")
    parser.add_argument("--base", choices=["auto", "python", "debian"], default=os.environ.get("IMAGE_BASE", "auto"))
    parser.add_argument("--tag", help=f"default: {default_tag()}")
    options = parser.parse_args(argv)
    try:
        if options.action == "licences":
            print(licences(options.tag), end="")
        else:
            print(build(options.base, options.tag))
    except (ImageError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        print(f"image: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
