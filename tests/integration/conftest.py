"""Fixtures for tests against a real control plane.

One control plane serves the whole session (started here, or an already running one when
``JOBRULES_REUSE_CLUSTER=1`` and ``KUBECONFIG`` are set); every test gets its own namespace.
Tests that need a part the session lacks (a binary missing, see the warnings printed at its
start) ask for its fixture and are skipped with the reason.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from support import apiserver
import pytest

from devkit import cluster
from runtime.controller.kube import Client


@dataclass(frozen=True, slots=True)
class Session:
    """The control plane the tests talk to. ``plane`` is None when reusing one started elsewhere;
    its parts are then read from the API (a controller manager and a scheduler are assumed)."""

    api: Client
    plane: cluster.ControlPlane | None
    nodes: tuple[str, ...]
    training_operator: bool

    @classmethod
    def of(cls, api: Client, plane: cluster.ControlPlane | None) -> Session:
        if plane is not None:
            nodes = plane.nodes if plane.scheduler and plane.kwok else ()
            return cls(api, plane, nodes, plane.training_operator)
        key, value = cluster.KWOK_NODE_ANNOTATION
        nodes = tuple(node["metadata"]["name"] for node in apiserver.get(api, apiserver.NODES.path())["items"]
                      if (node["metadata"].get("annotations") or {}).get(key) == value)
        webhooks = apiserver.VALIDATING_WEBHOOKS.path(name=cluster.TRAINING_OPERATOR_WEBHOOKS)
        return cls(api, None, nodes, apiserver.exists(api, webhooks))

    @property
    def has_controller_manager(self) -> bool:
        return self.plane is None or self.plane.controller_manager


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `image` build the image (minutes): they run only when asked for, `-m image`."""
    if "image" in (config.option.markexpr or ""):
        return
    building = [item for item in items if item.get_closest_marker("image")]
    if building:
        config.hook.pytest_deselected(items=building)
        items[:] = [item for item in items if not item.get_closest_marker("image")]


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[Session]:
    if os.environ.get("JOBRULES_REUSE_CLUSTER") == "1" and os.environ.get("KUBECONFIG"):
        with Client.from_kubeconfig(os.environ["KUBECONFIG"], name="jobrules-tests") as api:
            yield Session.of(api, None)
        return
    # Finding the binaries may mean building them for minutes, or warn of a missing one: show it.
    with pytestconfig.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        binaries = cluster.find_binaries()
    with cluster.running(binaries=binaries) as plane, plane.client() as api:
        yield Session.of(api, plane)


@pytest.fixture(scope="session")
def api(control_plane: Session) -> Client:
    return control_plane.api


@pytest.fixture
def controller_manager(control_plane: Session) -> None:
    """Skip tests that need kube-controller-manager when it is not running (envtest assets)."""
    if not control_plane.has_controller_manager:
        pytest.skip("kube-controller-manager is missing (KUBEBUILDER_ASSETS has none)")


@pytest.fixture
def kwok_nodes(control_plane: Session) -> tuple[str, ...]:
    """The KWOK nodes pods run on; skips the test when there are none (kube-scheduler or KWOK
    missing)."""
    if not control_plane.nodes:
        pytest.skip("no KWOK nodes (kube-scheduler or kwok is missing)")
    return control_plane.nodes


@pytest.fixture
def training_operator(control_plane: Session, kwok_nodes: tuple[str, ...]) -> None:
    """Skip tests that need the training operator (and nodes for its pods) when it is not running."""
    if not control_plane.training_operator:
        pytest.skip("the training operator is not running (its binary is missing)")


@pytest.fixture
def namespace(request: pytest.FixtureRequest, control_plane: Session) -> Iterator[str]:
    """A fresh namespace named after the test, usable for pods; deleted (in the background) after."""
    api = control_plane.api
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{uuid.uuid4().hex[:6]}"
    apiserver.create(api, apiserver.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}})
    default_sa = apiserver.SERVICE_ACCOUNTS.path(name, "default")
    if control_plane.has_controller_manager:
        # The ServiceAccount admission plugin rejects pods until this exists.
        apiserver.wait_for(f"ServiceAccount {name}/default", lambda: apiserver.exists(api, default_sa))
    else:
        apiserver.create(api, apiserver.SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                 "metadata": {"name": "default", "namespace": name}})
    yield name
    apiserver.delete(api, apiserver.NAMESPACES.path(name=name))
