"""How a run reaches a model: an ``--endpoint`` (or several), or servers this process launches.

- :mod:`.open`          open an endpoint: external URL(s), a launched server, or a fleet of them
- :mod:`.dispatch`      one client over several servers: least-loaded choice, a lost server dropped
- :mod:`.in_flight`     requests in flight: fixed, or sized from the server's ``/metrics``
- :mod:`.watch`         an ``--endpoint``'s generations: down while requests were in flight, then up
- :mod:`.quarantine`    pages that crash a server: suspects, solo retries, quarantine
- :mod:`.command_lines` the command line of each server llm-ocr can start (vLLM with a family's
                        recipe, the shipped CPU engine and simulator)
- :mod:`.vllm`          the runtime of launched servers: process manager, fleet, reaper, GPU presets,
                        the ``/metrics`` parser

May import vlm, storage, container and the data model; never engines (they import it: their test
harness runs them with this process manager), runners, stages, commands, launchers, bench or report.
"""
