#!/usr/bin/env bash
# Build sagemaker/Dockerfile and push it to this account's ECR; prints the image URI for --image.
#
#   sagemaker/build_and_push.sh REGION [REPOSITORY (llm-ocr)] [TAG (the package version)]
#
# Needs the aws CLI (credentials that may create/push an ECR repository) and docker. Extra
# `docker build` arguments can be given in DOCKER_BUILD_ARGS (e.g. "--build-arg BASE=...").
# Builds for linux/amd64 whatever the machine: SageMaker's GPU instances are x86-64, and an image
# built on an ARM laptop without it would not start there (on ARM, docker emulates x86-64: slower).
set -euo pipefail

region="${1:-${AWS_REGION:-${AWS_DEFAULT_REGION:-}}}"
repository="${2:-llm-ocr}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
tag="${3:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml" | head -n 1)}"
if [ -z "$region" ]; then
  echo "usage: $0 REGION [REPOSITORY] [TAG]   (or set AWS_REGION)" >&2
  exit 2
fi

account="$(aws sts get-caller-identity --query Account --output text)"
registry="$account.dkr.ecr.$region.amazonaws.com"
image="$registry/$repository:$tag"

if ! aws ecr describe-repositories --repository-names "$repository" --region "$region" >/dev/null 2>&1; then
  aws ecr create-repository --repository-name "$repository" --region "$region" >/dev/null
  echo "created ECR repository $repository in $region" >&2
fi
aws ecr get-login-password --region "$region" | docker login --username AWS --password-stdin "$registry" >&2
# shellcheck disable=SC2086 # DOCKER_BUILD_ARGS is a list of words on purpose
docker build --platform linux/amd64 ${DOCKER_BUILD_ARGS:-} -f "$here/Dockerfile" -t "$image" "$root" >&2
docker push "$image" >&2
echo "$image"
