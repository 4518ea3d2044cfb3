"""``llm-ocr service`` (the gateway, and one worker unless ``--no-worker``) and ``llm-ocr worker``
(a worker alone, on the same database): docs/service.md."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os

from llm_ocr.outcomes import ExitCode

log = logging.getLogger("llm_ocr")

#: The modules ``llm-ocr service`` needs, by the package that provides each (extra ``service``).
NEEDED = {"fastapi": "fastapi", "uvicorn": "uvicorn", "python_multipart": "python-multipart"}


def _state_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default="llm-ocr-service", metavar="DIR",
                        help="folder of the SQLite database (service.db), and of documents and results unless "
                             "--store (default: ./llm-ocr-service)")
    parser.add_argument("--database", default=None, metavar="URL",
                        help="the state and queue on PostgreSQL (postgresql://user:password@host/db; needs "
                             "pip install 'llm-ocr[postgres]'), shared by any number of gateways and workers "
                             "(default: LLM_OCR_SERVICE_DATABASE, else the SQLite file under --data)")
    parser.add_argument("--store", default=None, metavar="URL",
                        help="documents and results: a folder or any store URL (s3://, gs://, hf://...; "
                             "default: --data)")
    parser.add_argument("--storage-options", default=None, metavar="JSON", help="fsspec storage options of --store")
    parser.add_argument("--callback-secret-file", default=None, metavar="FILE",
                        help="file whose first line signs documents' callbacks (HMAC-SHA256; else "
                             "LLM_OCR_SERVICE_CALLBACK_SECRET; none: unsigned)")


def _worker_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("worker")
    group.add_argument("--endpoint", default=os.environ.get("LLM_OCR_ENDPOINT"), metavar="URL",
                       help="an OpenAI-compatible endpoint (default: launch --engine for the worker's lifetime)")
    group.add_argument("--engine", default="auto", choices=["auto", "vllm", "cpu", "sim"],
                       help="the model server to launch without --endpoint, as llm-ocr run does")
    group.add_argument("--model", default=None, help="served model name (default: llm-ocr run's)")
    group.add_argument("--lease", type=float, default=30.0, metavar="S",
                       help="seconds a document's lease lasts unrenewed: a killed worker's document is taken "
                            "again after this (default: 30)")
    group.add_argument("--poll", type=float, default=1.0, metavar="S",
                       help="seconds between looks at an empty queue (default: 1)")
    group.add_argument("--concurrency", type=int, default=None, metavar="N",
                       help="documents read at once, sharing the worker's endpoint and in-flight limit; more "
                            "than --max-in-flight keeps the model busy on short documents (default: twice the "
                            "in-flight limit, at most 128)")
    group.add_argument("--max-deliveries", type=int, default=3, metavar="N",
                       help="workers lost on one document before it is failed (default: 3)")
    group.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                       help="requests in flight for the worker, shared by its documents (default: the launched "
                            "server's preset, else 64)")
    group.add_argument("--escalate-to", default=None, metavar="MODEL",
                       help="a stronger model that reads again each page whose first reading trips --escalate-on, "
                            "as llm-ocr run --escalate-to does (a submission may say escalate=off); needs "
                            "--escalate-endpoint")
    group.add_argument("--escalate-endpoint", default=None, metavar="URL",
                       help="the OpenAI-compatible endpoint serving --escalate-to (key: LLM_OCR_ESCALATE_API_KEY)")
    group.add_argument("--escalate-on", default=None, metavar="SIGNALS",
                       help="signals that send a page to --escalate-to, comma-separated (default: llm-ocr run's)")


def _k8s_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("kubernetes (print the manifests, start nothing)")
    group.add_argument("--k8s-manifests", action="store_true",
                       help="print the Kubernetes objects of this service (gateway and worker Deployments, a Service, "
                            "an autoscaler on queue depth) for kubectl apply -f -, with --store, --endpoint, "
                            "--concurrency and --lease as given")
    group.add_argument("--k8s-image", default=None, help="an image with llm-ocr[service,postgres] installed")
    group.add_argument("--k8s-namespace", default="llm-ocr", help="the namespace (default: llm-ocr)")
    group.add_argument("--k8s-gateways", type=int, default=2, metavar="N", help="gateway replicas (default: 2)")
    group.add_argument("--k8s-workers", default="1:10", metavar="MIN:MAX",
                       help="the worker autoscaler's bounds (default: 1:10)")
    group.add_argument("--k8s-worker-gpus", type=int, default=0, metavar="N",
                       help="GPUs per worker pod (without --endpoint the worker launches its engine on them)")
    group.add_argument("--k8s-database-secret", default="llm-ocr-database:url", metavar="SECRET:KEY",
                       help="the Secret holding the PostgreSQL URL (default: llm-ocr-database:url)")
    group.add_argument("--k8s-token-secret", default="llm-ocr-token:token", metavar="SECRET:KEY",
                       help="the Secret holding the API token (default: llm-ocr-token:token)")
    group.add_argument("--k8s-secret-ref", action="append", default=[], metavar="NAME=SECRET[:KEY]",
                       help="a variable every pod reads from a Secret (store credentials: "
                            "AWS_SECRET_ACCESS_KEY=aws:key)")


def _print_k8s_manifests(args: argparse.Namespace) -> int:
    from llm_ocr.launchers.core.spec import LaunchError
    from llm_ocr.launchers.k8s.manifest import to_yaml
    from llm_ocr.launchers.k8s.service import ServiceDeploy, parse_worker_range, service_manifests
    from llm_ocr.service.config import ServiceError

    try:
        if not args.store:
            raise LaunchError("--k8s-manifests needs --store: the object store every pod keeps documents and "
                              "results on")
        low, high = parse_worker_range(args.k8s_workers)
        from llm_ocr.runners.shard import DEFAULT_IN_FLIGHT
        from llm_ocr.service.worker import default_concurrency

        # Written into the worker's command as the autoscaler's target per worker: the two agree
        # (a worker that launches its engine would otherwise size it from the engine's preset).
        concurrency = args.concurrency or default_concurrency(args.max_in_flight or DEFAULT_IN_FLIGHT)
        try:
            run_options = _run_options(args)  # checked as a worker started with them would
        except ServiceError as exc:
            raise LaunchError(str(exc)) from None
        # The worker's own flags beyond those ServiceDeploy has fields for, as given.
        extra = ["--model", args.model] if args.model else []
        for flag in ("escalate_to", "escalate_endpoint", "escalate_on"):
            if run_options.get(flag):
                extra += [f"--{flag.replace('_', '-')}", str(run_options[flag])]
        deploy = ServiceDeploy(image=args.k8s_image or "", store=args.store, namespace=args.k8s_namespace,
                               endpoint=args.endpoint, gateways=args.k8s_gateways, min_workers=low, max_workers=high,
                               concurrency=concurrency, max_in_flight=args.max_in_flight, lease=args.lease,
                               database_secret=args.k8s_database_secret, token_secret=args.k8s_token_secret,
                               secret_refs=args.k8s_secret_ref, worker_gpus=args.k8s_worker_gpus,
                               extra_worker_args=extra)
        print(to_yaml(service_manifests(deploy)), end="")
    except LaunchError as exc:
        log.error("%s", exc)
        return ExitCode.COULD_NOT_RUN
    return ExitCode.OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``service`` and ``worker`` sub-commands."""
    service = sub.add_parser(
        "service", help="an HTTP service: submit documents, poll their status, fetch Markdown (docs/service.md)",
        description="Serve the HTTP API (POST /v1/documents, GET /v1/documents/ID, /markdown, /pages, /fields, "
        "/figures/ID, DELETE, /metrics, /healthz, /readyz; the schema at /openapi.json) and run one worker in the "
        "same process. "
        "Needs the extra: pip install 'llm-ocr[service]'.",
    )
    service.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (beyond loopback, a token is required)")
    service.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free port)")
    service.add_argument("--token-file", default=None, metavar="FILE",
                         help="file whose first line is the API token (else LLM_OCR_SERVICE_TOKEN)")
    _state_options(service)
    limits = service.add_argument_group("limits")
    limits.add_argument("--max-upload-mb", type=float, default=100.0, help="largest upload, MB (default: 100)")
    limits.add_argument("--max-pages", type=int, default=2000, help="most pages in one document (default: 2000)")
    limits.add_argument("--queue-length", type=int, default=1000,
                        help="most documents waiting; more are answered 429 (default: 1000)")
    limits.add_argument("--retry-after", type=int, default=5, help="seconds a 429 asks a client to wait (default: 5)")
    limits.add_argument("--allow-local-urls", action="store_true",
                        help='accept {"url": ...} naming a file on this machine (refused by default)')
    service.add_argument("--schemas", default=None, metavar="DIR",
                         help="folder of Fields schemas (NAME.json) a submission may name with schema=NAME")
    service.add_argument("--no-worker", action="store_true", help="the gateway alone (run llm-ocr worker elsewhere)")
    _worker_options(service)
    _k8s_options(service)
    service.set_defaults(handler=run_service_command)

    worker = sub.add_parser(
        "worker", help="a worker of an llm-ocr service: reads queued documents (docs/service.md)",
        description="Take documents from the service's queue under a lease and read them (Extract, Describe, "
        "Assemble), until SIGINT or SIGTERM; any number of workers may share one --data (or one --database "
        "and --store, across machines).",
    )
    _state_options(worker)
    _worker_options(worker)
    worker.set_defaults(handler=run_worker_command)


def _missing() -> list[str]:
    return [package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None]


def _run_options(args: argparse.Namespace) -> dict[str, object]:
    """The worker's run options from its flags (the in-flight limit, the stronger model);
    :class:`~llm_ocr.service.config.ServiceError` names a bad combination."""
    from llm_ocr.service.config import ServiceError

    run_options: dict[str, object] = {"max_in_flight": args.max_in_flight} if args.max_in_flight else {}
    if args.escalate_to or args.escalate_endpoint or args.escalate_on:
        # A run without --escalate-endpoint launches a second server; a worker's runs are its
        # documents, so that would be a server per document.
        if not (args.escalate_to and args.escalate_endpoint):
            raise ServiceError("--escalate-to MODEL and --escalate-endpoint URL go together (and --escalate-on "
                               "with them): a worker does not launch a server per document for the stronger model")
        run_options.update(escalate_to=args.escalate_to, escalate_endpoint=args.escalate_endpoint)
        if args.escalate_on:
            from pydantic import ValidationError

            from llm_ocr.options import EscalateOptions

            try:  # checked once here, not failed in every document's run
                EscalateOptions(escalate_on=args.escalate_on)
            except ValidationError as exc:
                raise ServiceError(f"--escalate-on: {exc.errors()[0]['msg']}") from None
            run_options["escalate_on"] = args.escalate_on
    return run_options


def _config(args: argparse.Namespace, *, gateway: bool) -> object:
    from llm_ocr.service.config import Limits, ServiceConfig, database_of, read_callback_secret, read_token
    from llm_ocr.service.worker import WorkerSettings

    run_options = _run_options(args)
    settings = WorkerSettings(endpoint=args.endpoint, engine=args.engine, model=args.model, lease=args.lease,
                              poll=args.poll, concurrency=args.concurrency, max_deliveries=args.max_deliveries,
                              run_options=run_options)
    config = ServiceConfig(data=args.data, store=args.store, database_url=database_of(args.database),
                           storage_options=json.loads(args.storage_options) if args.storage_options else {},
                           worker=settings)
    config.callbacks.secret = read_callback_secret(args.callback_secret_file)
    if gateway:
        config.schemas = args.schemas
        config.host, config.port = args.host, args.port
        config.token = read_token(args.token_file)
        config.limits = Limits(max_upload=int(args.max_upload_mb * 1024 * 1024), max_pages=args.max_pages,
                               queue_length=args.queue_length, retry_after=args.retry_after,
                               allow_local_urls=args.allow_local_urls)
        if args.no_worker:
            config.worker = None
    return config


def run_service_command(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr service``."""
    if args.k8s_manifests:
        return _print_k8s_manifests(args)
    missing = _missing()
    if missing:
        log.error("llm-ocr service needs %s: pip install 'llm-ocr[service]'", ", ".join(missing))
        return ExitCode.COULD_NOT_RUN
    from llm_ocr.service.config import ServiceConfig, ServiceError, check_exposure
    from llm_ocr.service.server import run_service

    try:
        config = _config(args, gateway=True)
        assert isinstance(config, ServiceConfig)
        check_exposure(config.host, config.token)
        run_service(config)
    except ServiceError as exc:
        log.error("%s", exc)
        return ExitCode.COULD_NOT_RUN
    return ExitCode.OK


def run_worker_command(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr worker``."""
    from llm_ocr.service.config import ServiceConfig, ServiceError, run_worker

    try:
        config = _config(args, gateway=False)
        assert isinstance(config, ServiceConfig)
        run_worker(config)
    except ServiceError as exc:
        log.error("%s", exc)
        return ExitCode.COULD_NOT_RUN
    return ExitCode.OK
