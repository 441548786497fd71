"""The Prometheus workspace URL the charts' tests pass (an AMP query URL's form)."""

PROMETHEUS_URL = "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-example/"
