#!/usr/bin/env bash
# A Python base image without a container registry: debootstrap a minimal Debian with python3 from
# Debian's packages and `docker import` it. Images take it as their BASE build argument; users with
# a registry use the official python slim image instead (each Dockerfile's default).
# Usage: infra/base-image.sh [TAG]   (default testbed-base:bookworm; skipped when the tag exists)
set -euo pipefail
TAG=${1:-testbed-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG exists"; exit 0
fi
echo "base-image.sh: building the base image $TAG (debootstrap of Debian $SUITE: a few minutes)…" >&2
command -v debootstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }

root=$(mktemp -d /tmp/testbed-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
  "$SUITE" "$root" "$MIRROR" >/tmp/testbed-debootstrap.log 2>&1 \
  || { echo "debootstrap failed; see /tmp/testbed-debootstrap.log" >&2; exit 1; }
# Trust the machine's CA bundle so pip inside builds reaches the package index
# (docs/architecture.md#running-services-without-a-registry).
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import \
  --change 'ENV LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_BREAK_SYSTEM_PACKAGES=1' \
  --change 'CMD ["python3"]' - "$TAG" >/dev/null
echo "$TAG built: $(docker image inspect "$TAG" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"
