"""The controller's shell: what talks to the API server and runs the reconcile loop. The
decisions it carries out are made by pure modules of `runtime` (the work queue, the evaluator);
`kube` is its transport, `metrics` its Prometheus metrics."""
