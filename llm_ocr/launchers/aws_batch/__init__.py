"""AWS Batch's room: its adapter (:mod:`.adapter`: credentials, queue, job definition revisions,
array children's states, CloudWatch logs) and its requests (:mod:`.request`: the
``RegisterJobDefinition`` and ``SubmitJob`` bodies, the instance sizes and the limits botocore's
service model and Batch's API reference put on them). It imports the launchers' core, never another
platform's room."""
