"""The runtime of the model servers a run launches (vLLM, or a shipped engine playing it).

- :mod:`.process`    :class:`~.process.ManagedServer`: one server subprocess (its whole process
                     group): start, health, restarts, shutdown; reading ``/metrics``. The one
                     process manager: :mod:`llm_ocr.engines.harness` runs the shipped engines with it
- :mod:`.fleet`      several servers together: one vLLM per GPU
- :mod:`.reaper`     the watcher that takes a server's process group down if llm-ocr is SIGKILLed
- :mod:`.presets`    vLLM sizing per GPU, and GPU detection with ``nvidia-smi``
- :mod:`.prometheus` the one ``/metrics`` parser (Prometheus text; vLLM's series by short name)
"""
