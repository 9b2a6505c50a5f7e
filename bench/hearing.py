"""The floor under the controller's CPU: a process that hears what the controller hears, and drops it.

    KUBECONFIG=... .venv/bin/python bench/hearing.py NAMESPACE [POD_LABEL_KEY]

It lists, then watches, the namespace's batch Jobs and its pods (those with the label key, as the
controller's pod watch selects them) through the controller's own transport
(`runtime.controller.kube.Client.watch`: the same TLS connection, chunk reader and JSON decoder),
and keeps nothing of the events. `bench/controller.py` runs it beside the controller: its CPU per
pod event is what hearing the events costs any controller built on this stack, before anything is
cached, decided or written. It prints `ready` once both watches are open and, on SIGUSR1, the
events heard so far as one JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.controller import kube  # noqa: E402


def hear(client: kube.Client, name: str, path: str, query: list[tuple[str, str]],
         heard: Counter[str], opened: threading.Barrier) -> None:
    """List, then watch from the list's version for ever, counting the events and no more.
    Any error but a quiet watch ends the process: a floor that missed events would be low."""
    try:
        version = client.list(path, query=query)["metadata"]["resourceVersion"]
        opened.wait()
        while True:
            try:
                for event in client.watch(path, [*query, ("resourceVersion", version),
                                                 ("allowWatchBookmarks", "true")],
                                          read_timeout=90):
                    version = event["object"]["metadata"]["resourceVersion"]
                    heard[name] += event["type"] != "BOOKMARK"
            except kube.Timeout:
                continue
    except BaseException as error:
        print(f"hearing {name}: {error}", file=sys.stderr, flush=True)
        os._exit(1)


def main() -> None:
    namespace, label = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    client = kube.Client.from_kubeconfig(os.environ["KUBECONFIG"])
    heard: Counter[str] = Counter()
    opened = threading.Barrier(3)
    watches = [("jobs", kube.Resource("batch/v1", "jobs").path(namespace), []),
               ("pods", kube.Resource("v1", "pods").path(namespace),
                [("labelSelector", label)] if label else [])]
    for name, path, query in watches:
        threading.Thread(target=hear, args=(client, name, path, query, heard, opened),
                         daemon=True).start()
    opened.wait()
    print("ready", flush=True)
    signal.signal(signal.SIGUSR1, lambda *_: print(json.dumps(heard), flush=True))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
