"""Deploy pins: the values a deploy needs that no default can hold (a hub commit per imported
checkpoint, the Gateway API plugin's digest, the two EKS add-on versions), resolved by
``python -m experiment pins`` (``resolve``) and recorded in cdk.context.json (``record``)."""
