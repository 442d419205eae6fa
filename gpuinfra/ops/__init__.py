"""Day-2 operations: reading a running cluster's Prometheus, Alertmanager and Kubernetes API,
and the S3 model repository its Triton loads.

The ops wing sits beside review and lab: it uses the core (add-on specs, cluster facts, the
accounting rules' names) and is used by the CLI only. Nothing here changes a cluster.
"""
