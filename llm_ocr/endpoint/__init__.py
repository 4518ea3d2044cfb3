"""Where requests go: an ``--endpoint`` (or several), or servers this process launches.

- :mod:`.open`       open an endpoint: external URL(s), a launched server, or a fleet of them
- :mod:`.dispatch`   one client over several servers: least-loaded choice, a lost server dropped
- :mod:`.in_flight`  requests in flight: fixed, or sized from the server's ``/metrics``
- :mod:`.watch`      an ``--endpoint``'s generations: down while requests were in flight, then up
- :mod:`.quarantine` pages that crash a server: suspects, solo retries, quarantine

May import servers, vlm, storage and the data model; never runners, stages, commands,
launchers, bench or report.
"""

from llm_ocr.endpoint.open import Endpoint, EndpointError, ServerOptions, open_endpoint

__all__ = ["Endpoint", "EndpointError", "ServerOptions", "open_endpoint"]
