"""``python -m experiment preflight``: read-only checks, before ``cdk deploy``, of what the
deploy needs from the AWS account, this machine and the model hub (``checks``), printed one
line each with the fix (``cli``)."""
