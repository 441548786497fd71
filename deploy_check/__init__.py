"""``python -m experiment check``: after ``cdk deploy`` (or beside ``python -m local_run``), is
everything that was deployed up, wired and watched? Grouped checks in the manner of
``linkerd check``, each passed, failed (with what to change) or skipped (with why):

- ``model``: a check's typed result and the report;
- ``kube``: the checks over Kubernetes objects (nodes, DRA ResourceSlices and ResourceClaims,
  Jobs, the Argo Rollout and its AnalysisRun), read through a small interface
  (``KubeReader``) whose cluster implementation is the official ``kubernetes`` client;
- ``http``: the checks over HTTP (each arm serves the configured model, the gateway answers
  each class), through an ``Endpoint``: a URL locally, a port-forward on the cluster;
- ``telemetry``: the checks over the Prometheus HTTP API (the arms' and the gateway's series,
  the guardrail rules, firing alerts, the probe's last success), plain HTTP locally and
  SigV4-signed against the Amazon Managed Service for Prometheus workspace on the cluster;
- ``cli``: ``add_arguments`` and ``run``, the command.
"""
