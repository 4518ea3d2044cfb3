"""Ray's room: its adapter (:mod:`.adapter`: one Ray Job per launch through the Jobs API), the
driver that job runs on the cluster (:mod:`.driver`: shipped as a file, standard library and
``ray`` only, never llm-ocr) and the shards' states read from the job's log (:mod:`.state`). It
imports the launchers' core, never another platform's room."""
