#!/usr/bin/env bash
# Build the testbed's container images and print their sizes: the data provider (testbed-provider)
# and one image per operator type (testbed-o1 ... testbed-o9, operators/Dockerfile; testbed-a ...
# testbed-d: the PRESPS chain's pass-through operators, whose service is the emulated WORK_MS).
#
#   bash infra/images.sh [BASE]        BASE: the base image (default: python:3.11-slim where it is
#                                      present locally, else testbed-base:bookworm, made here with
#                                      debootstrap by infra/base-image.sh if missing)
#   env: TAG (default latest), OPERATORS (default "O1 O2 ... O9 A B C D"), PROVIDER=0 skips the provider,
#        JOB=0 skips testbed-job (the live job mode's keyed worker, operators/keyed_worker.py)
#
# Works offline apart from Debian's and PyPI's package indexes. Unchanged layers come from the build
# cache, so a rebuild after a code change takes seconds. The live config's image names are
# <image_prefix><operator, lower case>:<image_tag> = testbed-o1:latest etc.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${1:-${BASE:-}}
TAG=${TAG:-latest}
OPERATORS=${OPERATORS:-O1 O2 O3 O4 O5 O6 O7 O8 O9 A B C D}
PROVIDER=${PROVIDER:-1}
JOB=${JOB:-1}

# Per-type extras; everything else is common (see operators/Dockerfile).
apt_packages() { case $1 in O1) echo "tesseract-ocr tesseract-ocr-eng" ;; *) echo "" ;; esac; }
pip_packages() { case $1 in O9) echo "fpdf2>=2.7" ;; *) echo "" ;; esac; }

bash infra/docker.sh start >/dev/null
if [ -z "$BASE" ]; then
  if docker image inspect python:3.11-slim >/dev/null 2>&1; then BASE=python:3.11-slim; else BASE=testbed-base:bookworm; fi
fi
case $BASE in testbed-base:*) bash infra/base-image.sh "$BASE" ;; esac
echo "images.sh: base $BASE"

# one line on stderr when an image is missing (a first build takes minutes); a rebuild of images
# that exist comes from the build cache in seconds and says nothing there
wanted=()
[ "$PROVIDER" = 0 ] || wanted+=("testbed-provider:$TAG")
[ "$JOB" = 0 ] || wanted+=("testbed-job:$TAG")
for op in $OPERATORS; do wanted+=("testbed-${op,,}:$TAG"); done
if ! docker image inspect "${wanted[@]}" >/dev/null 2>&1; then
  echo "images.sh: building the operator images (first time: a few minutes)…" >&2
fi

built=()
build() {  # name, docker build args...
  local name=$1; shift
  local t0=$SECONDS log
  log=$(mktemp)
  if ! docker build --build-arg BASE="$BASE" -t "$name" "$@" . >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; echo "images.sh: building $name failed" >&2; exit 1
  fi
  rm -f "$log"
  printf 'images.sh: %-28s built in %3d s\n' "$name" $((SECONDS - t0))
  built+=("$name")
}

[ "$PROVIDER" = 0 ] || build "testbed-provider:$TAG" -f data_provider/Dockerfile
# the keyed worker runs from the operator image's layers; the runtime starts it with its own entrypoint
[ "$JOB" = 0 ] || build "testbed-job:$TAG" -f operators/Dockerfile --build-arg OPERATOR=job
for op in $OPERATORS; do
  build "testbed-${op,,}:$TAG" -f operators/Dockerfile --build-arg OPERATOR="$op" \
    --build-arg APT_PACKAGES="$(apt_packages "$op")" --build-arg PIP_PACKAGES="$(pip_packages "$op")"
done

# Sizes: SIZE is the whole image. The operator images share their layers up to the per-type extras
# (base, user, common Python packages; O2-O8 share all of them), so EXTRA, the size over the
# smallest operator image, is what O1's tesseract and O9's PDF library add on disk.
mb() { awk '{printf "%.0f MB", $1/1e6}'; }
smallest=$(for name in "${built[@]}"; do
  case $name in testbed-o[0-9]*) docker image inspect "$name" --format '{{.Size}}' ;; esac; done | sort -n | head -n 1)
echo
printf '%-28s %-9s %9s %9s\n' IMAGE OPERATOR SIZE EXTRA
for name in "$BASE" "${built[@]}"; do
  bytes=$(docker image inspect "$name" --format '{{.Size}}')
  op=$(docker image inspect "$name" --format '{{with .Config.Labels}}{{index . "testbed.operator"}}{{end}}')
  extra=-
  case $name in testbed-o[0-9]*) extra=$(echo $((bytes - smallest)) | mb) ;; esac
  printf '%-28s %-9s %9s %9s\n' "$name" "${op:--}" "$(echo "$bytes" | mb)" "$extra"
done
