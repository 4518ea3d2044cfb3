"""Hugging Face Jobs' room: its adapter (:mod:`.adapter`: one job per shard through
``huggingface_hub``'s Jobs API, the wheel in a model repo mounted as a volume, the ``run_job`` body
and the jobs' states). It imports the launchers' core, never another platform's room."""
