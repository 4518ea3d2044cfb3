"""What a shard job needs inside its container, before and beside the stages.

- :mod:`.shard_index` which shard this process is, as the platform tells it
- :mod:`.aws_secrets` secrets a job fetches by name from AWS Secrets Manager at start

These are the contracts the launchers configure jobs for, so :mod:`llm_ocr.launchers` may import
them. Imports nothing of llm_ocr but the standard library's peers (boto3 lazily).
"""
