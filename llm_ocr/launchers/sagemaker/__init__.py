"""SageMaker Processing's room: its adapter (:mod:`.adapter`: credentials, role, quota, the wheel
in S3, jobs' states and CloudWatch logs) and its request (:mod:`.request`: the
``CreateProcessingJob`` body and the limits botocore's service model puts on it). It imports the
launchers' core, never another platform's room."""
