"""What a user meets at the console (issue 45): the live progress in a real terminal, the end of
a run and ``llm-ocr status`` naming the failed documents, and a rerun's two accounting lines."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, run_cli
from tests.docs import make_corpus
from tests.stages.common import run_in_process
from tests.waiting import hold_request, wait_until, wait_until_held

#: The live line of ``llm-ocr run``'s page flow, drawn by rich in the terminal: the stage, a
#: bar, pages done of the total, and the time left.
LIVE = re.compile(r"^extract\+describe .*\b(\d+)/9 pages +ETA \d+:\d\d:\d\d\b")
#: The warning Ctrl-C makes llm-ocr log, as the command line formats its log records.
WARNING = re.compile(r"^\d\d:\d\d:\d\d WARNING llm_ocr: received SIGINT: stopping intake")


class Pane:
    """A command in a detached tmux pane of a fixed size, on a tmux server of its own."""

    def __init__(self, folder: Path, command: list[str], width: int = 120, height: int = 40) -> None:
        folder.mkdir()
        self.socket = folder / "socket"
        config = folder / "tmux.conf"
        # The pane stays after the command ends, for its last screen.
        config.write_text("set -g remain-on-exit on\n")
        # The exit status is written by the pane's shell: tmux marks a pane dead when its terminal
        # closes and learns the status when it reaps the process, and once in a few runs on a busy
        # machine it never showed one (pane_dead 1, pane_dead_status empty). The trap makes the
        # shell outlive a Ctrl-C, which the command (reset to the default handler) still gets.
        self.status_file = folder / "status"
        self.tmux("-f", str(config), "new-session", "-d", "-x", str(width), "-y", str(height), "-c", str(REPO),
                  f"trap true INT; {shlex.join(command)}; echo $? > {shlex.quote(str(self.status_file))}")

    def tmux(self, *args: str) -> str:
        # The pane's programs get the tmux server's environment, this process's: without the
        # COLUMNS and LINES pytest's may hold, which rich would take for the terminal's size.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, check=True,
                              timeout=30, env=env).stdout

    def screen(self) -> list[str]:
        """The lines on the pane's screen now (a line the terminal wrapped, joined), blank ones and
        tmux's own "Pane is dead" left out."""
        lines = self.tmux("capture-pane", "-p", "-J").splitlines()
        return [line.rstrip() for line in lines if line.strip() and not line.startswith("Pane is dead")]

    def exit_status(self) -> int | None:
        """The command's exit status once it has ended, else None."""
        text = self.status_file.read_text() if self.status_file.exists() else ""
        return int(text) if text.endswith("\n") else None

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, timeout=30)


def test_live_progress_in_a_terminal_names_the_stage_shows_total_and_eta_and_logs_go_above_it(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=3, pages=3)
    out = tmp_path / "out"
    with SimulatedServer("--instant", corpus=tmp_path / "docs") as server:
        # The first four requests are answered (a page is done), the next ones held: the run
        # stays in its page flow, its live line up, however slow the machine.
        held_at = hold_request(server, after=4, count=30)
        pane = Pane(tmp_path / "tmux", [
            sys.executable, "-m", "llm_ocr.cli", "run", str(tmp_path / "docs"), "--output", str(out),
            "--endpoint", server.base_url, "--workers", "0", "--max-in-flight", "2", "--grace-period", "600",
        ])
        try:
            wait_until_held(server, held_at)
            wait_until(lambda: any(LIVE.match(line) for line in pane.screen()), "a live line with the total and an ETA")
            # Ctrl-C, as a user types it: llm-ocr logs a warning while the live line is up (the
            # pages in flight are held, so the run cannot end first).
            pane.tmux("send-keys", "C-c")
            screen = wait_until(lambda: (lines := pane.screen()) and any(WARNING.match(line) for line in lines)
                                and LIVE.match(lines[-1]) and lines, "the warning above the live line")
            server.clear_faults()
            server.release()
            status = wait_until(lambda: pane.exit_status() is not None, "the run ended") and pane.exit_status()
            end = pane.screen()
        finally:
            pane.close()
    # The warning is a line of its own, above the live line, which is drawn once, at the bottom.
    warning = next(i for i, line in enumerate(screen) if WARNING.match(line))
    assert "pages/s" not in screen[warning] and "ETA" not in screen[warning], screen
    assert [i for i, line in enumerate(screen) if LIVE.match(line)] == [len(screen) - 1], screen
    done = int(LIVE.match(screen[-1])[1])  # type: ignore[index]
    assert 1 <= done < 9, screen[-1]
    # Interrupted (exit status 3): the live line is gone and the run ends with its summary.
    assert status == 3, end
    assert not any(LIVE.match(line) for line in end), end
    assert end[-1].startswith(f"llm-ocr run -> {out}: exit code 3 (interrupted (run again to resume)); pages: "), end


def test_the_end_of_a_run_and_status_name_the_failed_documents_and_a_rerun_accounts_alike(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=1, pages=1)  # doc000.pdf, read fine
    (docs / "zero.pdf").write_bytes(b"")
    for number in range(1, 21):  # 21 failed documents: one more than the console names
        (docs / f"zz-{number:02d}.pdf").write_bytes(b"")
    out = tmp_path / "out"
    command = ("run", str(docs), "--output", str(out), "--workers", "0", "--progress", "off")
    with SimulatedServer("--instant", corpus=docs) as server:
        first = run_cli(*command, "--endpoint", server.base_url)
        assert first.returncode == 1, first.stderr[-3000:]
        end = first.stdout.splitlines()
        # The run ends with the summary in words, then the failed documents: the first 20 named
        # with their errors, and where the 21st is.
        assert end[0].startswith(f"llm-ocr run -> {out}: exit code 1 (finished, but some pages failed"), end
        assert "; pages: ok 1, truncated 0, error 21, quarantined 0, skipped 0" in end[0], end
        assert end[1] == "extract: 21 failed documents:", end
        assert end[2] == "  zero.pdf: empty file (0 bytes)", end
        assert end[3:22] == [f"  zz-{n:02d}.pdf: empty file (0 bytes)" for n in range(1, 20)], end
        assert end[22] == f"  1 more: the rows with status error in {out / 'extract'}", end
        # Describe and Assemble fail the same documents: said, not listed again.
        assert any(line.startswith("describe: 21 failed documents, as named for extract; 1 more") for line in end)
        status = run_cli("status", str(out))
        assert status.returncode == 0, status.stderr
        assert "    zero.pdf: empty file (0 bytes)" in status.stdout.splitlines(), status.stdout
        assert f"    1 more: the rows with status error in {out / 'extract'}" in status.stdout.splitlines(), status.stdout
        again = run_in_process(*command, "--endpoint", server.base_url, "--json")  # (in process: quicker)
    # The rerun retries the failed documents; each stage's line counts the page done earlier
    # alike (Describe's used to say "done earlier 0" beside Extract's "done earlier 1").
    assert again.returncode == 1, again.stderr[-3000:]
    lines = {m[1]: m[2] for m in re.finditer(r"\[(extract|describe) shard 1/1\] (pages seen .*)", again.stderr)}
    assert lines["extract"] == lines["describe"] == (
        "pages seen 22 = ok 0 + truncated 0 + error 21 + quarantined 0 + done earlier 1; documents 22 (1 already "
        "complete)"), again.stderr[-3000:]
    assert again.stdout.startswith("{") and len(again.stdout.splitlines()) == 1  # --json: the stats, one line


