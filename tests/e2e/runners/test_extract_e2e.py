"""Extract end to end: the CLI against the simulated DeepSeek-OCR server, as users run it."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import numpy as np
import pypdfium2
from PIL import Image

from llm_ocr.testing import SimulatedServer
from tests.conftest import assert_deepseek_request, read_stage, run_cli
from tests.docs import make_corpus, make_pdf


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9.]+", text)


def recall(expected: list[str], text: str) -> float:
    have = set(words(text))
    return sum(w in have for w in expected) / max(1, len(expected))


def extract(inputs: list[str], out: Path, server: SimulatedServer, *extra: str, timeout: float = 120):
    return run_cli(
        "extract", *inputs, "--output", str(out), "--endpoint", server.base_url,
        "--workers", "0", "--progress", "log", *extra, timeout=timeout,
    )


def test_rows_per_page_in_document_order_with_text_and_figures(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs", documents=3, pages=3)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        result = run_cli(
            "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--endpoint", server.base_url,
            "--progress", "log", env={"PYTHONPROFILEIMPORTTIME": "1"},  # every import, on stderr
        )
    assert result.returncode == 0, result.stderr
    # Its parts written from lists, the command's process never imported pandas for pyarrow.
    assert "pandas.core" not in result.stderr and "llm_ocr.runners.workers" in result.stderr
    import datasets  # here, not at the module's top: every pytest worker collects the module (about 0.8 CPU-s)

    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "out/extract/*.parquet"), split="train")
    keys = [(r["doc_id"], r["page"]) for r in ds]
    assert keys == [(name, p) for name in sorted(corpus) for p in (1, 2, 3)]
    for row in ds:
        assert row["status"] == "ok", row["error"]
        expected = [w for line in corpus[row["doc_id"]][row["page"] - 1] for w in words(line)]
        assert recall(expected, row["markdown"]) > 0.99
        assert "<|ref|>" not in row["markdown"] and "<|ref|>" in row["raw"]
        # Odd pages carry one chart; its crop is referenced from the markdown and decodes.
        assert len(row["figures"]) == (1 if row["page"] % 2 else 0)
        for figure in row["figures"]:
            assert f"![](figure:{figure['id']})" in row["markdown"]
            assert isinstance(figure["image"], Image.Image)


def test_figure_crop_matches_the_box_and_the_page(tmp_path: Path) -> None:
    make_pdf(tmp_path / "one.pdf", pages=1, seed=7)
    with SimulatedServer(corpus=tmp_path / "one.pdf") as server:
        assert extract([str(tmp_path / "one.pdf")], tmp_path / "out", server).returncode == 0
    (row,) = read_stage(tmp_path / "out", "extract")
    assert (row["width"], row["height"]) == (1224, 1584)  # Letter at 144 DPI
    (figure,) = row["figures"]
    # The chart was drawn at x=72pt, y=380pt (from the bottom), 300x180pt: at 2 px/pt that is
    # [144, 464, 744, 824] in pixels; 0..999 quantisation costs at most ~2 px.
    assert np.allclose(figure["bbox"], [144, 464, 744, 824], atol=4)
    crop = Image.open(io.BytesIO(figure["image"]["bytes"])).convert("RGB")
    x1, y1, x2, y2 = figure["bbox"]
    assert crop.size == (x2 - x1, y2 - y1)
    page = pypdfium2.PdfDocument(str(tmp_path / "one.pdf"))[0].render(scale=2).to_pil().convert("RGB")
    reference = np.asarray(page.crop((x1, y1, x2, y2)), dtype=float)
    assert np.abs(np.asarray(crop, dtype=float) - reference).mean() < 4  # JPEG q95 noise only


def test_every_request_follows_the_deepseek_ocr_recipe(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=2)
    with SimulatedServer("--max-model-len", "4096", corpus=tmp_path / "docs") as server:
        assert extract([str(tmp_path / "docs")], tmp_path / "out", server).returncode == 0
        requests = server.requests()
    assert len(requests) == 4
    for entry in requests:
        assert_deepseek_request(entry, max_model_len=4096, min_image_bytes=1000)


def test_max_tokens_is_never_above_the_context(tmp_path: Path) -> None:
    make_pdf(tmp_path / "a.pdf", pages=1)
    with SimulatedServer("--max-model-len", "2048", corpus=tmp_path / "a.pdf") as server:
        result = extract([str(tmp_path / "a.pdf")], tmp_path / "out", server, "--max-tokens", "100000")
        (entry,) = server.requests()
    assert result.returncode == 0, result.stderr
    body = entry.get("body", entry)
    assert body["max_tokens"] <= 2048 - 900


def test_four_shards_together_equal_one_shard(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=7, pages=2)
    (tmp_path / "docs" / "scan.png").write_bytes(Path("samples/notes.png").read_bytes())
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        assert extract([str(tmp_path / "docs")], tmp_path / "one", server).returncode == 0
        for shard in range(4):
            result = extract([str(tmp_path / "docs")], tmp_path / "four", server, "--num-shards", "4", "--shard-index", str(shard))
            assert result.returncode == 0, result.stderr

    def comparable(rows):
        return sorted(
            (r["doc_id"], r["page"], r["status"], r["markdown"], json.dumps([f["bbox"] for f in r["figures"]]))
            for r in rows
        )

    one, four = read_stage(tmp_path / "one", "extract"), read_stage(tmp_path / "four", "extract")
    assert len(one) == 15
    assert comparable(one) == comparable(four)
    names = sorted(p.name for p in (tmp_path / "four/extract").glob("*.parquet"))
    assert {re.search(r"part-(\d{5})-of-00004", n).group(1) for n in names} == {"00000", "00001", "00002", "00003"}
    markers = sorted(p.name for p in (tmp_path / "four/_state/extract").glob("done-*"))
    assert markers == [f"done-{i:05d}-of-00004.json" for i in range(4)]


def test_rerun_skips_finished_shard_and_documents(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=1)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        assert extract([str(tmp_path / "docs")], tmp_path / "out", server).returncode == 0
        assert extract([str(tmp_path / "docs")], tmp_path / "out", server).returncode == 0
        assert len(server.requests()) == 2
        # A new document in the folder: the shard runs again, but only the new pages are sent.
        make_pdf(tmp_path / "docs" / "zzz.pdf", pages=2, seed=99)
        (tmp_path / "out/_state/extract/done-00000-of-00001.json").unlink()
        assert extract([str(tmp_path / "docs")], tmp_path / "out", server).returncode == 0
        assert len(server.requests()) == 4
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted((r["doc_id"], r["page"]) for r in rows) == [("doc000.pdf", 1), ("doc001.pdf", 1), ("zzz.pdf", 1), ("zzz.pdf", 2)]


def test_failed_pages_are_retried_by_a_rerun_and_appear_once(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=3, pages=2)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        server.inject("error", count=2, status=400)  # permanent errors: no retry within the run
        first = extract([str(tmp_path / "docs")], tmp_path / "out", server)
        assert first.returncode == 1, first.stderr
        rows = read_stage(tmp_path / "out", "extract")
        assert sorted(r["status"] for r in rows).count("error") == 2
        assert all("HTTP 400" in r["error"] for r in rows if r["status"] == "error")
        second = extract([str(tmp_path / "docs")], tmp_path / "out", server)
        assert second.returncode == 0, second.stderr
        assert len(server.requests()) == 6 + 2
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted((r["doc_id"], r["page"]) for r in rows) == [(f"doc{d:03d}.pdf", p) for d in range(3) for p in (1, 2)]
    assert {r["status"] for r in rows} == {"ok"}


def test_repetition_loops_are_retried_then_kept_as_truncated(tmp_path: Path) -> None:
    make_pdf(tmp_path / "a.pdf", pages=1)
    make_pdf(tmp_path / "b.pdf", pages=1, seed=3)
    with SimulatedServer(corpus=tmp_path) as server:
        # a.pdf: loops once, then the hotter retry finishes; b.pdf: loops twice, stays truncated.
        server.inject("loop", count=1)
        assert extract([str(tmp_path / "a.pdf")], tmp_path / "out_a", server).returncode == 0
        server.inject("loop", count=2)
        assert extract([str(tmp_path / "b.pdf")], tmp_path / "out_b", server, "--max-tokens", "300").returncode == 0
        temperatures = [r.get("body", r)["temperature"] for r in server.requests()]
    (a,) = read_stage(tmp_path / "out_a", "extract")
    (b,) = read_stage(tmp_path / "out_b", "extract")
    assert a["status"] == "ok" and a["attempts"] == 2 and a["finish_reason"] == "stop"
    assert b["status"] == "truncated" and b["finish_reason"] == "length" and b["markdown"]
    assert "max_tokens" in b["error"]
    assert temperatures == [0.0, 0.2, 0.0, 0.2]


def test_bad_input_gets_error_rows_and_the_rest_completes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    make_pdf(docs / "good.pdf", pages=2)
    good = (docs / "good.pdf").read_bytes()
    (docs / "truncated.pdf").write_bytes(good[: len(good) // 2])
    (docs / "corrupt.pdf").write_bytes(b"%PDF-1.4\n this is not really a pdf \n%%EOF")
    (docs / "empty.pdf").write_bytes(b"")
    (docs / "text.png").write_bytes(b"hello, I am a text file pretending to be a PNG\n")
    Image.new("1", (12000, 11000)).save(docs / "huge.png", optimize=True)
    from reportlab.pdfgen import canvas

    locked = canvas.Canvas(str(docs / "locked.pdf"), encrypt="secret")
    locked.drawString(72, 720, "secret text")
    locked.save()
    with SimulatedServer(corpus=docs) as server:
        result = extract([str(docs)], tmp_path / "out", server, "--max-image-pixels", "100000000")
    assert result.returncode == 1, result.stderr
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(tmp_path / "out", "extract")}
    assert rows[("good.pdf", 1)]["status"] == rows[("good.pdf", 2)]["status"] == "ok"
    expected = {
        "truncated.pdf": "PDF",
        "corrupt.pdf": "PDF",
        "empty.pdf": "empty file",
        "text.png": "not a readable image",
        "huge.png": "over the limit",
        "locked.pdf": "password",
    }
    for name, message in expected.items():
        row = rows[(name, 0)]
        assert row["status"] == "error" and message in row["error"], (name, row["error"])


def test_could_not_run_exit_codes(tmp_path: Path) -> None:
    make_pdf(tmp_path / "a.pdf", pages=1)
    dead = run_cli("extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out"), "--endpoint", "http://127.0.0.1:9/v1",
                   "--dead-after", "1")
    assert dead.returncode == 2 and "not answering" in dead.stderr and "waited 1s" in dead.stderr
    missing = run_cli("extract", str(tmp_path / "nope"), "--output", str(tmp_path / "out-missing"), "--endpoint",
                      "http://127.0.0.1:9/v1")
    assert missing.returncode == 2 and "input not found" in missing.stderr
    assert not (tmp_path / "out-missing").exists()  # checked before the output is probed: nothing created
    with SimulatedServer() as server:
        wrong = run_cli("extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out"), "--endpoint", server.base_url, "--model", "other/model")
    assert wrong.returncode == 2 and "does not serve" in wrong.stderr
    bad_option = run_cli("extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out"), "--dpi", "-3")
    assert bad_option.returncode == 2 and "--dpi" in bad_option.stderr


def test_options_come_from_environment_variables(tmp_path: Path) -> None:
    make_pdf(tmp_path / "a.pdf", pages=1)
    with SimulatedServer(corpus=tmp_path / "a.pdf") as server:
        result = run_cli(
            "extract", str(tmp_path / "a.pdf"),
            env={"LLM_OCR_OUTPUT": str(tmp_path / "out"), "LLM_OCR_ENDPOINT": server.base_url, "LLM_OCR_WORKERS": "0", "LLM_OCR_DPI": "72"},
        )
    assert result.returncode == 0, result.stderr
    (row,) = read_stage(tmp_path / "out", "extract")
    assert (row["width"], row["height"]) == (612, 792)


def test_finevision_shaped_parquet_dataset(tmp_path: Path) -> None:
    pages = [Image.open("samples/notes.png").convert("RGB"), Image.new("RGB", (300, 200), "white")]

    def encoded(image: Image.Image) -> dict:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return {"bytes": buffer.getvalue(), "path": None}

    import datasets

    features = datasets.Features(
        {
            "images": datasets.List(datasets.Image()),
            "texts": datasets.List({"user": datasets.Value("string"), "assistant": datasets.Value("string")}),
            "source": datasets.Value("string"),
        }
    )
    ds = datasets.Dataset.from_dict(
        {
            "images": [[encoded(pages[0]), encoded(pages[1])], [], [encoded(pages[1])]],
            "texts": [[{"user": "u", "assistant": "a"}]] * 3,
            "source": ["olmOCR"] * 3,
        },
        features=features,
    )
    (tmp_path / "fv").mkdir()
    ds.to_parquet(str(tmp_path / "fv" / "train-00000.parquet"))
    with SimulatedServer() as server:
        result = extract([str(tmp_path / "fv")], tmp_path / "out", server)
    assert result.returncode == 1, result.stderr  # the row without images is an error row
    rows = read_stage(tmp_path / "out", "extract")
    got = [(r["doc_id"], r["page"], r["status"]) for r in rows]
    assert got == [
        ("fv/default/train/00000000", 1, "ok"),
        ("fv/default/train/00000000", 2, "ok"),
        ("fv/default/train/00000001", 0, "error"),
        ("fv/default/train/00000002", 1, "ok"),
    ]
    assert "no images" in rows[2]["error"]


def test_progress_lines_when_not_on_a_terminal(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=2)
    with SimulatedServer("--prefill-ms", "400", "--slots", "1", corpus=tmp_path / "docs") as server:
        result = extract([str(tmp_path / "docs")], tmp_path / "out", server, "--progress-interval", "0.3", "--json")
    assert result.returncode == 0
    lines = [l for l in result.stderr.splitlines() if "pages/s" in l]
    assert len(lines) >= 3  # periodic lines plus the final one
    assert "INFO llm_ocr: extract: pages 4/4 (ok 4, truncated 0, error 0) | docs 2/2 |" in lines[-1], lines[-1]
    # Each line names the stage; once a page is done (the total was known from the start: the
    # input's two documents, then its four pages), the time left.
    assert all(": extract: pages " in line for line in lines), lines
    midway = [line for line in lines[:-1] if re.search(r"pages [123]/4 ", line)]
    assert midway and all(re.search(r" \| ETA 0:00:\d\d \| ", line) for line in midway), lines
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["pages"] == {"ok": 4, "truncated": 0, "error": 0, "quarantined": 0, "quarantined_earlier": 0,
                              "total": 4, "skipped": 0, "seen": 4}


def test_kill_at_random_moments_then_rerun_gives_the_same_rows(tmp_path: Path) -> None:
    import os
    import random
    import signal
    import subprocess
    import sys

    from tests.waiting import hold_request, wait_until, wait_until_held

    make_corpus(tmp_path / "docs", documents=8, pages=3)
    rng = random.Random(1234)
    with SimulatedServer("--prefill-ms", "300", "--slots", "3", corpus=tmp_path / "docs") as server:
        reference = extract([str(tmp_path / "docs")], tmp_path / "ref", server)
        assert reference.returncode == 0
        out = tmp_path / "killed"
        args = [
            sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(out),
            "--endpoint", server.base_url, "--workers", "0", "--progress", "off",
            "--flush-interval", "0.2", "--part-rows", "2", "--max-in-flight", "4",
        ]
        saved_after_kill = []
        for _ in range(3):
            saved = len(read_stage(out, "extract"))
            # Each run is killed while its requests are held from a random point of the run on:
            # after 5 to 7 answered, past the first wave of 4 sent at once, every request is held
            # (4 in flight when the kill lands), so a run stores at most 7 pages and the third
            # still has 10 to send. The run cannot finish before the kill, however loaded the
            # machine; the kill itself lands a random moment later.
            server.clear_faults()  # the holds the last run left queued
            held_at = hold_request(server, after=rng.randint(5, 7), count=24)
            process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_until_held(server, held_at, process)
                wait_until(lambda before=saved: len(read_stage(out, "extract")) > before,
                           "a part of this run was stored", process=process)
                time.sleep(rng.uniform(0.0, 0.5))  # where the kill lands; the held request bounds the run
                os.kill(process.pid, signal.SIGKILL)
            finally:
                process.wait()
            saved_after_kill.append(len(read_stage(out, "extract")))
        assert 0 < saved_after_kill[0] and saved_after_kill[-1] < 24  # every kill interrupted its run
        server.clear_faults()
        final = extract([str(tmp_path / "docs")], out, server)
        assert final.returncode == 0, final.stderr

    def comparable(rows):
        return sorted((r["doc_id"], r["page"], r["status"], r["markdown"]) for r in rows)

    rows = read_stage(out, "extract")
    assert len(rows) == 24 == len({(r["doc_id"], r["page"]) for r in rows})
    assert comparable(rows) == comparable(read_stage(tmp_path / "ref", "extract"))
