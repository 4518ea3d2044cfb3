"""``llm-ocr launch k8s`` against a fake Kubernetes API server that really runs the pods.

The official ``kubernetes`` client talks to it through a kubeconfig (tests/fakes/fake_k8s.py); its
Job controller runs each index as a local subprocess with ``JOB_COMPLETION_INDEX`` set: the init
container joins the wheel from the ConfigMaps the launcher created, the bootstrap installs it, and
``llm-ocr`` launches its model server (the fake ``vllm`` running the simulator) and writes to S3
(moto) with the credentials of a Kubernetes Secret, read through a ``secretKeyRef``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest
import yaml

from tests import waiting
from tests.conftest import REPO
from tests.docs import make_corpus
from tests.fakes.container import VENVS
from tests.launchers.common import llm_ocr, llm_ocr_batch, wait_until
from tests.launchers.k8s_common import NAMESPACE, PLANTED, READER, Cluster, cluster, expected_pages, keys
from tests.launchers.simulators import HELD_START, JobSimulator, simulator_in
from tests.storage_servers import VENV_BIN

# The hang guard (pytest-timeout; 300 s by default): a test waits for a launch, a retry and a relaunch in turn, each with its own hang guard.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("k8s") / "docs"
    make_corpus(folder, documents=6, pages=2)
    return folder


def _status(output: str) -> list[str]:
    """``llm-ocr jobs status OUT --json`` as a case of :func:`llm_ocr_batch` (with the commands beside it)."""
    return ["jobs", "status", output, "--json"]


def _without_launch_id(body: dict, launch_id: str) -> str:
    return json.dumps(body, sort_keys=True).replace(launch_id, "LAUNCH")


def test_shards_run_as_one_indexed_job_every_page_once_and_the_secret_by_reference_only(tmp_path: Path, corpus: Path) -> None:
    # Index 0's pod installs the shipped wheel into a venv of its own, as in the cloud (the
    # bootstrap's install end to end); the other pods link theirs to the run's venv of the same
    # wheel (tests/fakes/fake_uv.py), as every other fake job of the run does.
    own_venv = {0: {VENVS.variable: ""}}
    with cluster(tmp_path / "cluster", corpus, index_env=own_venv) as world:
        env = world.env(tmp_path)
        # The user's commands in turn, in one interpreter (tests/launchers/batch_cli.py): the dry
        # runs, the launch, waited for, the table, one shard's logs and a relaunch of the finished
        # output. Two indexes show what three would (index 0 installs, index 1 links; the last is
        # not the first); a third cost a pod, its server and its llm-ocr more.
        dry, dry_yaml, done, shown, logs, again = llm_ocr_batch([
            (world.launch_args("--dry-run", shards=2), {}), (world.launch_args("--dry-run", "--yaml", shards=2), {}),
            (world.launch_args("--wait", "--interval", "0.5", shards=2), {}),
            (_status(world.output), {}), (["jobs", "logs", world.output, "--shard", "1"], {}), (world.launch_args(shards=2), {}),
        ], env, timeout=600)
        assert dry["code"] == 0 and dry_yaml["code"] == 0, dry["stderr"] + dry_yaml["stderr"]
        plan = json.loads(dry["stdout"])  # exactly one JSON object on stdout
        assert set(plan) == {"platform", "launch_id", "jobs", "requests"} and plan["platform"] == "k8s"
        assert [j["shard_index"] for j in plan["jobs"]] == [0, 1]
        assert all(j["secrets"] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] for j in plan["jobs"])
        *code_maps, yaml_job = yaml.safe_load_all(dry_yaml["stdout"])
        assert {m["kind"] for m in code_maps} == {"ConfigMap"} and yaml_job["kind"] == "Job"

        assert done["code"] == 0, done["stdout"] + done["stderr"]
        assert "every shard finished" in done["stdout"]
        (job,) = world.api.all_jobs
        assert [(p.index, p.phase) for p in sorted(job.pods, key=lambda p: p.index)] == [(0, "Succeeded"), (1, "Succeeded")]
        for stage in ("extract", "describe"):
            rows = world.rows(stage)
            assert keys(rows) == expected_pages(corpus), stage
            assert {r["status"] for r in rows} == {"ok"}
        assert sorted(d["doc_id"] for d in world.rows("assemble")) == sorted(p.name for p in corpus.glob("*.pdf"))

        # Each pod knew its index from the Job and the count from the launcher; the secret arrived.
        pods = sorted(job.pods, key=lambda p: p.index)
        assert [(p.env["JOB_COMPLETION_INDEX"], p.env["LLM_OCR_NUM_SHARDS"]) for p in pods] == [("0", "2"), ("1", "2")]
        assert all(p.env["AWS_SECRET_ACCESS_KEY"] == PLANTED for p in pods)
        installs = ["\n".join(p.main[0].log) for p in pods]
        assert "fake uv: installed llm_ocr-" in installs[0] and "linked to the run's venv" not in installs[0], installs[0]
        assert all("linked to the run's venv" in text for text in installs[1:])
        # The dry run showed the Job the API server then received (but for the launch id), and the
        # YAML is the same Job.
        (received,) = [r["body"] for r in world.api.calls("POST", "/jobs")]
        real_id = received["metadata"]["labels"]["llm-ocr-launch"]
        assert _without_launch_id(plan["requests"][0], plan["launch_id"]) == _without_launch_id(received, real_id)
        yaml_id = yaml_job["metadata"]["labels"]["llm-ocr-launch"]
        assert _without_launch_id(yaml_job, yaml_id) == _without_launch_id(plan["requests"][0], plan["launch_id"])
        # The wheel, once: the dry runs created nothing (nor another Job: one POST above).
        assert len(world.api.calls("POST", "/configmaps")) == len(code_maps)

        # The table from the record, the Job and the pods; one shard's log; the relaunch submits nothing.
        assert shown["code"] == 0, shown["stderr"]
        table = json.loads(shown["stdout"])
        assert [row["state"] for row in table["shards"]] == ["done"] * 2
        assert [row["job_state"] for row in table["shards"]] == ["Succeeded (attempt 1)"] * 2
        assert logs["code"] == 0, logs["stderr"]
        assert "[extract shard 2/2] pages seen" in logs["stdout"] and "[extract shard 1/2]" not in logs["stdout"]
        assert again["code"] == 0 and "nothing to launch" in again["stdout"], again["stderr"]
        assert len(world.api.calls("POST", "/jobs")) == 1

        # The planted key: only in the Secret, never sent by the launcher nor shown anywhere.
        places = {
            "dry run": dry["stdout"] + dry["stderr"] + dry_yaml["stdout"] + dry_yaml["stderr"],
            "launch output": done["stdout"] + done["stderr"] + again["stdout"] + again["stderr"],
            "requests to the API server": json.dumps(world.api.requests),
            "pod logs": world.api.log_text() + logs["stdout"],
            "status": json.dumps(table),
            "output bucket": world.bucket_text("ocr"),
            "launch cache": "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json")),
        }
        leaked = [where for where, text in places.items() if PLANTED in text]
        assert not leaked, f"the secret leaked into {leaked}"


def _first_pod_simulator(world: Cluster, job: str, index: int) -> JobSimulator | None:
    """The simulated model server of index ``index``'s first pod, once it listens: found by that
    pod's own folder (its ``HOME``), never by the index alone. ``test_cancel_deletes_the_job_and_stops_every_pod``
    holds an index 1 at start-up too, in another worker, as does this test in another checkout's
    run on the machine: searched by the index over every process, this test could make another's
    server ready instead of its own and wait 240 s for a part its own never wrote (as a fresh
    clone's run beside another did; a stray simulator of index 1 held at start-up does it every time)."""
    pods = world.api.pods_of(job, index)
    return simulator_in(pods[0].folder) if pods else None


def test_a_failed_index_is_retried_alone_a_could_not_run_index_is_not_and_the_relaunch_runs_only_it(
    tmp_path: Path, corpus: Path
) -> None:
    # Index 1's first pod answers three requests, then holds every one (its simulator waits to be
    # told it is ready: the faults are queued before the first request). One request at a time, so
    # the three are the first page and its figure (whose row is then written), and one more, of the
    # six its two documents need. It is killed there (SIGKILL, exit 137: a counted failure, retried
    # by backoffLimitPerIndex). Index 2's pods cannot run (exit 2: FailIndex,
    # no retry). No race: index 1 cannot finish before the kill.
    held = {1: {"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} --instant --slots 1 --startup-delay 3600",
                "LLM_OCR_MAX_IN_FLIGHT": "1"}}
    broken = {2: {"LLM_OCR_MAX_IN_FLIGHT": "not-a-number"}}
    with cluster(tmp_path / "cluster", corpus, index_env=broken, first_attempt_env=held) as world:
        env = world.env(tmp_path)
        # Static shards: with work groups the other indexes could read index 1's free groups,
        # and its retry would have nothing to resume (work groups: test_stragglers_e2e).
        args = world.launch_args("--part-rows", "1", "--no-steal")
        first = llm_ocr(*args, env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        (job,) = world.api.all_jobs
        simulator = wait_until(lambda: _first_pod_simulator(world, job.name, 1), timeout=240, period=0.2)
        simulator.hold(after=3)
        simulator.ready()
        wait_until(lambda: any(k.startswith(f"{world.prefix}/extract/part-00001-of-00003")
                               for k in world.moto.list("ocr", f"{world.prefix}/extract/")),
                   timeout=240, period=0.1)
        victim = world.api.pods_of(job.name, 1)[0]
        world.api.kill(victim)
        world.api.wait_job(NAMESPACE, job.name)

        assert [len(world.api.pods_of(job.name, i)) for i in range(3)] == [1, 2, 1]  # only index 1 again
        assert (job.completed, job.failed) == ({0, 1}, {2})
        assert job.conditions[-1]["reason"] == "FailedIndexes"
        shown, logs = llm_ocr_batch([(_status(world.output), {}), (["jobs", "logs", world.output, "--shard", "1"], {})], env)
        assert shown["code"] == 0, shown["stderr"]
        states = {row["shard"]: row for row in json.loads(shown["stdout"])["shards"]}
        assert (states[0]["state"], states[1]["state"], states[2]["state"]) == ("done", "done", "failed")
        assert states[1]["job_state"] == "Succeeded (attempt 2)"
        assert "container llm-ocr exited 2" in (states[2]["message"] or "")
        marker = world.marker("extract", 1, 3)
        assert marker["pages"]["skipped"] >= 1  # the retry resumed from the killed pod's part
        assert logs["code"] == 0 and logs["stdout"].count("===== pod ") == 2, logs["stdout"][-2000:]

        world.api.index_env.clear()  # the broken node is fixed
        # The relaunch, waited for; then, in the same interpreter, the ended shard's logs followed
        # (it prints them and returns) and the final table.
        again, followed, shown = llm_ocr_batch([([*args, "--wait", "--interval", "0.5"], {}),
                                                (["jobs", "logs", world.output, "--shard", "2", "-f"], {}), (_status(world.output), {})],
                                               env, timeout=600)
        assert again["code"] == 0, again["stdout"] + again["stderr"]
        relaunched = world.api.all_jobs[1]
        assert relaunched.spec["completions"] == 1
        (pod,) = relaunched.pods
        assert (pod.env["JOB_COMPLETION_INDEX"], pod.env["LLM_OCR_TASK_SHARDS"]) == ("0", "3:2")
        for stage in ("extract", "describe"):
            assert keys(world.rows(stage)) == expected_pages(corpus), stage
        assert followed["code"] == 0 and "[extract shard 3/3] pages seen" in followed["stdout"], followed["stderr"]
        assert shown["code"] == 0, shown["stderr"]
        final = json.loads(shown["stdout"])
        assert [row["state"] for row in final["shards"]] == ["done"] * 3
        assert final["shards"][0]["job_id"] == f"{job.name} index 0"  # from the first Job still
        assert final["shards"][2]["job_id"] == f"{relaunched.name} index 0"


def test_cancel_deletes_the_job_and_stops_every_pod(tmp_path: Path, corpus: Path) -> None:
    # The pods' servers never become ready (tests/launchers/simulators.py): both shards are running,
    # for certain, when the cancel lands, their llm-ocr waiting for its server as on a slow start
    # (with 3-second pages a loaded machine once let a shard finish first).
    with cluster(tmp_path / "cluster", corpus, sim_args=HELD_START) as world:
        env = world.env(tmp_path)
        assert llm_ocr(*world.launch_args("--grace-period", "1", shards=2), env=env).returncode == 0
        (job,) = world.api.all_jobs
        waiting.wait_until(lambda: len(job.pods) == 2 and all(simulator_in(p.folder) for p in job.pods),
                           "both pods' model servers listen", interval=0.5)
        pids = [p.main[0].process.pid for p in job.pods]
        one, everything = llm_ocr_batch([(["jobs", "cancel", world.output, "--shard", "1"], {}), (["jobs", "cancel", world.output], {})], env)
        assert one["code"] == 2 and "cannot stop only some of them" in one["stderr"]
        assert everything["code"] == 0 and "cancel sent to 1 job(s)" in everything["stdout"], everything["stderr"]
        assert world.api.calls("DELETE")[0]["query"]["propagationPolicy"] == "Foreground"
        wait_until(lambda: (NAMESPACE, job.name) not in world.api.jobs, timeout=120)
        assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert {row["state"] for row in world.status(env)["shards"]} == {"cancelled"}


def test_a_shared_volume_takes_local_paths_and_nothing_else_does(tmp_path: Path, corpus: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "scans").mkdir(parents=True)
    for pdf in sorted(corpus.glob("*.pdf"))[:2]:
        (shared / "scans" / pdf.name).write_bytes(pdf.read_bytes())
    with cluster(tmp_path / "cluster", corpus, claims={"ocr-data": shared}) as world:
        env = world.env(tmp_path)
        local = ["launch", "k8s", str(shared / "scans"), "--output", str(shared / "out"), "--num-shards", "2",
                 "--workers", "0"]
        refused, done = llm_ocr_batch([(local, {}), ([*local, "--pvc", f"ocr-data:{shared}", "--wait", "--interval", "0.5"], {})],
                                      env, timeout=600)
        assert refused["code"] == 2 and "a path on this machine, which the pods cannot see" in refused["stderr"]
        assert done["code"] == 0, done["stdout"] + done["stderr"]
        (received,) = [r["body"] for r in world.api.calls("POST", "/jobs")]
        volumes = received["spec"]["template"]["spec"]["volumes"]
        assert {"name": "claim-0", "persistentVolumeClaim": {"claimName": "ocr-data"}} in volumes
        from tests.conftest import read_stage

        rows = read_stage(shared / "out", "extract")
        assert sorted((r["doc_id"], r["page"]) for r in rows) == sorted((p.name, n) for p in sorted(corpus.glob("*.pdf"))[:2] for n in (1, 2))


BAD = [
    ("no kubeconfig", {"KUBECONFIG": "/nonexistent/kubeconfig"}, [], "no Kubernetes credentials"),
    ("a user who may not create Jobs", "reader", [], "may not create jobs, delete jobs, create configmaps in namespace ocr (RBAC)"),
    ("a local output", {}, ["--output", "/tmp/out"], "--output '/tmp/out' is a path on this machine, which the pods cannot see"),
    ("a local secret", {}, ["--secret", "AWS_SECRET_ACCESS_KEY"], "--secret AWS_SECRET_ACCESS_KEY: Kubernetes pods read secrets from Kubernetes Secrets"),
    ("a job name too long", {}, ["--job-name", "a" * 45], "is too long: the pods are named"),
    ("a job name Kubernetes refuses", {}, ["--job-name", "OCR_2024"], "--job-name 'OCR_2024': Kubernetes takes lowercase letters"),
    ("a toleration with a bad effect", {}, ["--toleration", "gpu:Never"], "the effect after ':' is one of"),
    ("a service account that does not exist", {}, ["--service-account", "nobody"], "--service-account nobody: no such ServiceAccount in namespace ocr"),
    ("a namespace that is not a name", {}, ["--namespace", "Team_A"], "--namespace 'Team_A'"),
    ("an unknown context", {}, ["--context", "prod"], "--context prod: no such context"),
    ("an hf:// output without HF_TOKEN", {}, ["--output", "hf://datasets/me/ocr"], "pass --secret-ref HF_TOKEN=hf-token"),
]


def test_bad_requests_fail_before_anything_is_created(tmp_path: Path, corpus: Path) -> None:
    with cluster(tmp_path / "cluster", corpus) as world:
        env = world.env(tmp_path)
        reader = world.env(tmp_path, token=READER)
        cases = []
        for _, change, extra, _ in BAD:
            args = world.launch_args()
            if extra[:1] == ["--output"]:
                args[args.index("--output") + 1] = extra[1]
                extra = extra[2:]
            changed = {k: v for k, v in reader.items() if k == "KUBECONFIG"} if change == "reader" else change
            cases.append(([*args, *extra], changed))
        results = llm_ocr_batch(cases, env)
        wrong = [f"{case}: exit {r['code']}, {r['stderr'][-500:]}" for (case, _, _, message), r in zip(BAD, results)
                 if r["code"] != 2 or message not in r["stderr"]]
        assert not wrong, "\n".join(wrong)
        assert not world.api.calls("POST", "/jobs") and not world.api.calls("POST", "/configmaps")


def test_kubectl_applies_the_dry_run_yaml_and_the_job_runs_every_page_once(tmp_path: Path, corpus: Path) -> None:
    # The real kubectl (client-side apply: each object's copy goes into its last-applied annotation,
    # which the API server caps at 256 KiB) against the fake; kubectl sends no token to an http://
    # server, so the fake lets requests without one write here.
    kubectl = os.environ.get("LLM_OCR_TEST_KUBECTL") or shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl is not installed: scripts/test installs Debian's kubernetes-client as root")
    with cluster(tmp_path / "cluster", corpus, tokens={"": "write"}) as world:
        env = world.env(tmp_path)
        dry = llm_ocr(*world.launch_args("--dry-run", "--yaml", shards=2), env=env)
        assert dry.returncode == 0, dry.stderr
        applied = subprocess.run([kubectl, "apply", "-f", "-", "--validate=false"], input=dry.stdout, text=True,
                                 capture_output=True, env=env, timeout=300)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert re.search(r"^job\.batch/llm-ocr-run-\S+ created$", applied.stdout, re.M), applied.stdout
        created = world.api.calls("POST", "/configmaps")
        assert created and all("kubectl.kubernetes.io/last-applied-configuration" in r["body"]["metadata"]["annotations"]
                               for r in created)
        (job,) = world.api.all_jobs
        finished = world.api.wait_job(NAMESPACE, job.name, timeout=600)
        assert finished.conditions[-1]["type"] == "Complete", world.api.log_text()[-3000:]
        for stage in ("extract", "describe"):
            assert keys(world.rows(stage)) == expected_pages(corpus), stage


def _docs_job() -> dict:
    """The Job YAML of docs/platforms-kubernetes.md ("Your own Job YAML")."""
    text = (REPO / "docs" / "platforms-kubernetes.md").read_text()
    section = text[text.index("## Your own Job YAML"):]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def test_your_own_job_yaml_from_the_docs_runs_every_page_once(tmp_path: Path, corpus: Path) -> None:
    import kubernetes_validate
    from kubernetes import client, config

    job = _docs_job()
    for release in ("1.33", "1.37"):
        kubernetes_validate.validate(job, release, strict=True)
    # The docs' image, with llm-ocr in it (here: this checkout's venv); vLLM found on the GPU node
    # stands as the engine the run picks there (the fake node has no nvidia-smi).
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    images = {image: {"PATH": str(VENV_BIN), "LLM_OCR_ENGINE": "vllm", "LLM_OCR_WORKERS": "0"}}
    with cluster(tmp_path / "cluster", corpus, images=images) as world:
        # The docs' output, s3://ocr/2024, moved to this cluster's own prefix (as every test here writes).
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        command[command.index("--output") + 1] = world.output
        configuration = client.Configuration()
        config.load_kube_config(config_file=world.env(tmp_path)["KUBECONFIG"], client_configuration=configuration)
        client.BatchV1Api(client.ApiClient(configuration)).create_namespaced_job(NAMESPACE, job)
        finished = world.api.wait_job(NAMESPACE, job["metadata"]["name"], timeout=600)
        assert finished.conditions[-1]["type"] == "Complete", world.api.log_text()[-3000:]
        assert sorted(p.index for p in finished.pods) == list(range(job["spec"]["completions"]))
        for stage in ("extract", "describe"):
            assert keys(world.rows(stage)) == expected_pages(corpus), stage
