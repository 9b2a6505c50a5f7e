"""A tiny mutating admission webhook for the round-trip test: it annotates every pod it is sent
with the name of the user that created it, as an RFC 6902 JSON Patch.

Served by gunicorn over TLS: ``gunicorn --certfile ... --keyfile ... annotating_webhook:app``.
"""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
from flask import Flask, request

ANNOTATION = "jobrules.test/created-by"

app = Flask(__name__)


@app.post("/mutate")
def mutate() -> dict:
    review = request.get_json()
    pod = review["request"]["object"]
    patched = copy.deepcopy(pod)
    annotations = patched["metadata"].setdefault("annotations", {})
    annotations[ANNOTATION] = review["request"]["userInfo"]["username"]
    patch = jsonpatch.make_patch(pod, patched).patch
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": review["request"]["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        },
    }
