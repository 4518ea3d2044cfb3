"""The launchers' core room: everything a launch does whatever the platform.

- :mod:`.api`: the Python API (``llm_ocr.launch``, :class:`~.api.Launch`, ``status``, ``wait``,
  ``logs``, ``cancel``, ``costs``), which ``llm-ocr launch`` and ``llm-ocr jobs`` call;
- :mod:`.adapter`: the contract a platform room implements (:class:`~.adapter.Platform`);
- :mod:`.spec`: what a launch asks for (:class:`~.spec.LaunchOptions`, :class:`~.spec.LaunchRequest`)
  and the job specs it becomes (:class:`~.spec.ShardSpec`, :class:`~.spec.LaunchPlan`: the
  ``--dry-run`` JSON);
- :mod:`.plan`: every check before a job exists and one spec per shard still to run;
  :mod:`.submit`: ship, submit, record; :mod:`.follow`: what the record, the markers, the progress
  files and the platform say about a launch (fetching), and wait, logs, cancel;
- :mod:`.table`: the status table made of those facts (formatting, no I/O), with its totals and
  costs;
- :mod:`.record`: the launch record kept beside the output;
- :mod:`.sizing` (timeouts from page counts), :mod:`.estimate` (the dry run's plan per machine),
  :mod:`.images` (the image a family's server runs in on each platform), :mod:`.wheel` and
  :mod:`.command` (the code shipped with the jobs and the command that installs it), :mod:`.files`
  (local schema files shipped beside the output), :mod:`.aws` (what the AWS platforms share: the
  launcher's own credentials, kept out of every request).

The core never imports a platform room: it reaches an adapter by its platform's name through the
registry (:func:`llm_ocr.launchers.platform_class`); ``tests/test_layers.py`` checks it.

What it may import besides: :mod:`llm_ocr.storage`, :mod:`llm_ocr.config`, :mod:`llm_ocr.options`,
:mod:`llm_ocr.costs`, :mod:`llm_ocr.sources` (to check inputs before anything is submitted),
:mod:`llm_ocr.planning` (the dry run's estimate), the model families (their images), and the
container side's contracts the jobs are configured for (:mod:`llm_ocr.container`). Never the
runners, the pipeline or the model servers' internals: a launcher only builds and submits job specs
that run the same CLI inside a container, and reads what those runs leave in ``OUT/_state``.
"""
