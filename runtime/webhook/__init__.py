"""The webhook shell: the Flask app (`app`), gunicorn's settings and hooks (`gunicorn_conf`), the
environment it reads (`settings`) and its Prometheus metrics (`metrics`). The decisions are
`runtime.admission`'s."""
