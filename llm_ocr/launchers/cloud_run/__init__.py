"""Cloud Run Jobs' room: its adapter (:mod:`.adapter`: credentials, the wheel in Cloud Storage,
one kept job per output and one execution per launch, tasks' states and Cloud Logging) and its
request bodies (:mod:`.job`: the ``Job`` and the ``RunJobRequest`` overrides, with their checks).
It imports the launchers' core, never another platform's room."""
