"""A free TCP port, probed (no llm-ocr imports: the managed server's port-clash retry uses it too)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it).

    There is a window between closing the probe socket and the server binding the port: a
    managed server counts as ready only when no other process listens on its port, and one
    whose start-up says the address is in use is started again on another
    (:class:`llm_ocr.serving.vllm.process.ManagedServer`).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
