"""A job's very first step where the llm-ocr wheel lies in S3 and nothing mounts it: fetch, then bootstrap.

AWS Batch copies no file into a container (SageMaker's ``ProcessingInputs``, Cloud Run's volume
and Hugging Face's mounted repo have no Batch counterpart), and a stock vLLM image has neither
boto3 nor the AWS CLI. So the AWS Batch launcher's command is::

    python3 -c "<this module's code>" s3://BUCKET/.../llm_ocr-X-py3-none-any.whl[s3] llm-ocr run ...

run by the image's own ``python3``: it downloads the wheel with one signed ``GET`` (AWS Signature
Version 4, https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html) into
the temporary folder, then hands the local wheel and the rest of the words to
:func:`llm_ocr.container.bootstrap.main` imported from that wheel (the CUDA check, the venv,
``exec llm-ocr``), as every other platform's command does.

Credentials are the job role's, from the container credentials endpoint the ECS agent gives every
task of a job definition with a ``jobRoleArn`` (``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`` on
``169.254.170.2``, or ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` with
``AWS_CONTAINER_AUTHORIZATION_TOKEN``; https://docs.aws.amazon.com/AmazonECS/latest/developerguide/
task-iam-roles.html), else ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``.
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (path-style) replace
``https://BUCKET.s3.REGION.amazonaws.com``. Standard library only; the signature is checked against
botocore's in ``tests/launchers/test_aws_batch_units.py``. The launcher sends this code without
its docstrings (:func:`program`); a failure exits 2 with the reason, as the bootstrap does.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import sys
import tempfile
import urllib.parse
import urllib.request

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CREDENTIALS_HOST = "http://169.254.170.2"


def credentials(env: dict[str, str]) -> tuple[str, str, str]:
    """``(access key, secret key, session token or "")`` of the job role (see the module docstring)."""
    url = None
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        url = CREDENTIALS_HOST + env["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"]
    elif env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        url = env["AWS_CONTAINER_CREDENTIALS_FULL_URI"]
    if url:
        if not url.startswith(("http://", "https://")):
            raise RuntimeError(f"container credentials URL {url!r} is not http(s)")
        request = urllib.request.Request(url)  # noqa: S310 - http(s), checked above
        if env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN"):
            request.add_header("Authorization", env["AWS_CONTAINER_AUTHORIZATION_TOKEN"])
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - http(s), checked above
            found = json.load(answer)
        return found["AccessKeyId"], found["SecretAccessKey"], found.get("Token") or ""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN", "")
    raise RuntimeError("no AWS credentials in the container: give the job definition a jobRoleArn")


def object_url(bucket: str, key: str, region: str, env: dict[str, str]) -> str:
    """The object's URL: virtual-hosted on AWS, path-style on an endpoint set in the environment."""
    path = "/" + urllib.parse.quote(key, safe="/~")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        return endpoint.rstrip("/") + "/" + bucket + path
    suffix = ".amazonaws.com.cn" if region.startswith("cn-") else ".amazonaws.com"
    return f"https://{bucket}.s3.{region}{suffix}{path}"


def signed_headers(url: str, region: str, keys: tuple[str, str, str], now: datetime.datetime) -> dict[str, str]:
    """The headers of a Signature Version 4 ``GET url`` (empty payload) for S3 in ``region``."""
    access, secret, token = keys
    parts = urllib.parse.urlsplit(url)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": parts.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if token:
        headers["x-amz-security-token"] = token
    names = ";".join(sorted(headers))
    canonical = "\n".join(["GET", parts.path or "/", parts.query,
                           "".join(f"{name}:{headers[name]}\n" for name in sorted(headers)), names, EMPTY_SHA256])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for word in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, word.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={names}, "
                                f"Signature={signature}")
    return headers


def fetch(s3_url: str, folder: str, env: dict[str, str]) -> str:
    """Download ``s3://BUCKET/KEY`` into ``folder``; the local path."""
    bucket, _, key = s3_url[len("s3://"):].partition("/")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    url = object_url(bucket, key, region, env)
    now = datetime.datetime.now(datetime.timezone.utc)
    if not url.startswith(("http://", "https://")):
        raise RuntimeError(f"S3 endpoint {url!r} is not http(s)")
    request = urllib.request.Request(url, headers=signed_headers(url, region, credentials(env), now))  # noqa: S310
    os.makedirs(folder, exist_ok=True)
    local = os.path.join(folder, key.rsplit("/", 1)[-1])
    with urllib.request.urlopen(request, timeout=300) as answer, open(local + ".part", "wb") as out:  # noqa: S310
        while True:
            block = answer.read(1 << 20)
            if not block:
                break
            out.write(block)
    os.replace(local + ".part", local)
    return local


def main(argv: list[str]) -> None:
    """``s3://.../WHEEL[EXTRAS] PROGRAM ARGS...``: fetch the wheel, then the bootstrap from it."""
    url, bracket, extras = argv[0].partition("[")
    try:
        local = fetch(url, os.path.join(tempfile.gettempdir(), "llm-ocr-code"), dict(os.environ))
    except Exception as exc:  # noqa: BLE001 - said plainly: the job cannot start
        print(f"llm-ocr bootstrap: cannot fetch the llm-ocr wheel {url}: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.path.insert(0, local)
    from llm_ocr.container.bootstrap import main as bootstrap

    bootstrap([local + bracket + extras, *argv[1:]])


def program() -> str:
    """This module's code without docstrings, ending in a call of :func:`main` with ``sys.argv``:
    the ``python3 -c`` word of a job's command."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(sys.modules[__name__]))
    body = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    for node in body:
        if isinstance(node, ast.FunctionDef) and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            node.body = node.body[1:]
    tree.body = [node for node in body if not (isinstance(node, ast.FunctionDef) and node.name == "program")]
    return ast.unparse(tree) + "\nmain(sys.argv[1:])\n"
