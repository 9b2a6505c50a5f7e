"""Fixtures for tests against a real control plane.

One control plane serves the whole session (started here, or an already running one when
``JOBRULES_REUSE_CLUSTER=1`` and ``KUBECONFIG`` are set); every test gets its own namespace.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import kube
import pytest

from devkit import cluster
from runtime.controller.kube import Client


@dataclass(frozen=True, slots=True)
class Session:
    """The control plane the tests talk to. ``plane`` is None when reusing one started elsewhere."""

    api: Client
    plane: cluster.ControlPlane | None

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
        with Client.from_kubeconfig(os.environ["KUBECONFIG"]) as api:
            yield Session(api, None)
        return
    # Finding the binaries may mean building them for minutes, or warn of a missing one: show it.
    with pytestconfig.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        binaries = cluster.find_binaries()
    with cluster.running(binaries=binaries) as plane, plane.client() as api:
        yield Session(api, plane)


@pytest.fixture(scope="session")
def api(control_plane: Session) -> Client:
    return control_plane.api


@pytest.fixture
def controller_manager(control_plane: Session) -> None:
    """Skip tests that need kube-controller-manager when it is not running (envtest assets)."""
    if not control_plane.has_controller_manager:
        pytest.skip("kube-controller-manager is missing (KUBEBUILDER_ASSETS has none)")


@pytest.fixture
def namespace(request: pytest.FixtureRequest, control_plane: Session) -> Iterator[str]:
    """A fresh namespace named after the test, usable for pods; deleted (in the background) after."""
    api = control_plane.api
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{uuid.uuid4().hex[:6]}"
    kube.create(api, kube.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}})
    default_sa = kube.SERVICE_ACCOUNTS.path(name, "default")
    if control_plane.has_controller_manager:
        # The ServiceAccount admission plugin rejects pods until this exists.
        kube.wait_for(f"ServiceAccount {name}/default", lambda: kube.exists(api, default_sa))
    else:
        kube.create(api, kube.SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                 "metadata": {"name": "default", "namespace": name}})
    yield name
    kube.delete(api, kube.NAMESPACES.path(name=name))
