"""Static checks of the container build files: the operator images' Python dependencies agree with
pyproject.toml, the images run as a non-root user, and docker-compose.yml binds to loopback and
takes its credentials from the environment. (tests/integration/test_images.py runs the images.)"""
from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]


def requirement_lines(path: Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def pyproject_deps() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0].lower(): d.replace(" ", "") for d in deps}


def test_operator_requirements_match_pyproject():
    deps = pyproject_deps()
    reqs = requirement_lines(ROOT / "operators" / "requirements.txt")
    assert reqs, "operators/requirements.txt lists nothing"
    for req in reqs:
        name = re.split(r"[<>=!~ \[]", req, maxsplit=1)[0].lower()
        assert deps.get(name) == req.replace(" ", ""), f"{req} differs from pyproject.toml's {deps.get(name)}"
    # the operators package needs none of the testbed's heavy dependencies
    assert not {"pandas", "hydra-core", "pyspark", "numpy"} & {r.split(">")[0].split("=")[0] for r in reqs}


def test_per_type_extras_match_pyproject():
    script = (ROOT / "infra" / "images.sh").read_text()
    pip_extra = re.search(r'O9\) echo "([^"]+)"', script).group(1)
    assert pyproject_deps()["fpdf2"] == pip_extra
    assert re.search(r'O1\) echo "tesseract-ocr tesseract-ocr-eng"', script)


def test_operator_image_runs_as_non_root_with_the_runner():
    dockerfile = (ROOT / "operators" / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    # the runner starts with SIGTERM ignored (inherited across exec) until its handler is installed
    assert re.search(r'''^ENTRYPOINT \["/bin/sh", "-c", "trap '' TERM; exec python3 -m operators.runner"\]''',
                     dockerfile, re.M)
    assert re.search(r"^ARG BASE=python:3\.11-slim", dockerfile, re.M)
    # the code layer comes after the dependency layers (a code change rebuilds only that)
    assert dockerfile.index("COPY operators operators") > dockerfile.index("PIP_PACKAGES\" ]")


def test_compose_binds_to_loopback_and_reads_credentials_from_the_environment():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"rabbitmq", "redis", "kafka"}
    assert services["rabbitmq"]["image"].startswith("rabbitmq:") and "management" in services["rabbitmq"]["image"]
    assert services["redis"]["image"].startswith("redis:7")
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
    for name, svc in services.items():
        for port in svc["ports"]:
            assert port.startswith("${BIND_ADDRESS:-127.0.0.1}:"), f"{name}: {port} not bound to loopback by default"
    env = services["rabbitmq"]["environment"]
    assert env["RABBITMQ_DEFAULT_USER"].startswith("${RABBITMQ_DEFAULT_USER")
    assert env["RABBITMQ_DEFAULT_PASS"].startswith("${RABBITMQ_DEFAULT_PASS")
    assert "${REDIS_PASSWORD" in services["redis"]["command"]


def test_compose_build_override_builds_every_service_from_base():
    override = yaml.safe_load((ROOT / "docker-compose.build.yml").read_text())["services"]
    assert set(override) == {"rabbitmq", "redis", "kafka"}
    for name, svc in override.items():
        context = ROOT / svc["build"]["context"]
        assert (context / "Dockerfile").is_file(), name
        assert svc["build"]["args"]["BASE"].startswith("${BASE:-")
        assert re.search(r"^FROM \$\{BASE\}", (context / "Dockerfile").read_text(), re.M), name
