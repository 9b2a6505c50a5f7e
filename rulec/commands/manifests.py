"""`rulec manifests`: the objects that run the webhook in a cluster, as YAML or as a folder.

A thin shell over rulec.manifests: read a plan (or compile rules), a CA bundle, write YAML.
Exit 0 on success, 2 on unusable input (the CLI's usage/IO convention).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from rulec import api, manifests
from rulec.commands import inputs

# Certificate modes of --certs.
CERT_MODES = "cert-manager[=ISSUER] | self-managed"
KUSTOMIZATION = "kustomization.yaml"
_OBJECT_FILE = re.compile(r"\d{2}-[a-z]+-[-a-z0-9.]+\.yaml\Z")   # manifests.file_names


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "manifests",
        help="print the Kubernetes objects that deploy the webhook and the controller",
        description="Print, as multi-document YAML in apply order (kustomize's, which `kubectl "
                    "apply -k` uses; or as a folder of files with a kustomization.yaml), the "
                    "objects that run the jobrules webhook and controller for a plan: Namespace, "
                    "ServiceAccounts, the controller's Role and its ClusterRole derived from the "
                    "plan, bindings, plan ConfigMap, Secret, Service, Deployments, "
                    "PodDisruptionBudgets, certificates, the controller's FlowSchema and "
                    "PriorityLevelConfiguration, ServiceMonitor, NetworkPolicies and, "
                    "last, the MutatingWebhookConfiguration. See docs/deploy.md.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--plan", metavar="FILE", help="a compiled plan (rulec compile)")
    source.add_argument("--rules", metavar="PATH", nargs="+",
                        help=".rules files or folders, compiled on the fly")
    parser.add_argument("--image", required=True, metavar="REF",
                        help="the jobrules image (scripts/image.sh or the Containerfile), pushed "
                             "where the cluster pulls from")
    certs = parser.add_mutually_exclusive_group(required=True)
    certs.add_argument("--certs", metavar="MODE",
                       help="who issues the serving certificate: cert-manager (a self-signed "
                            "Issuer is included), cert-manager=ISSUER (an existing Issuer, "
                            "Issuer/NAME or ClusterIssuer/NAME), or self-managed (the "
                            "controller's leader issues and renews it)")
    certs.add_argument("--ca-bundle", metavar="FILE",
                       help="you issue it: PEM CA that signed the certificate you put in the "
                            f"Secret {manifests.TLS_SECRET}")
    parser.add_argument("--namespace", default="jobrules-system", metavar="NS",
                        help="namespace of the webhook (default: %(default)s)")
    parser.add_argument("--replicas", type=int, default=2, metavar="N",
                        help="webhook replicas; more than 1 adds a PodDisruptionBudget "
                             "(default: %(default)s)")
    parser.add_argument("--controller-replicas", type=int, default=2, metavar="N",
                        help="controller replicas: one leads on a Lease, the others take over; "
                             "more than 1 adds a PodDisruptionBudget (default: %(default)s)")
    parser.add_argument("--shards", type=int, default=1, metavar="M",
                        help="shard the jobs by namespace over the controller replicas, each "
                             "shard held on a Lease of its own; 1: one leader does all "
                             "(default: %(default)s; docs/controller.md, Shards)")
    parser.add_argument("--namespace-exclude", metavar="NS", action="append", default=[],
                        help="a namespace whose pods are never sent (repeatable; kube-system and "
                             "the webhook's own always are)")
    parser.add_argument("--network-policy", action="store_true",
                        help="add a NetworkPolicy: admission calls in, metrics from "
                             "--metrics-namespace, nothing out")
    parser.add_argument("--metrics-namespace", default="monitoring", metavar="NS",
                        help="the namespace the network policy lets scrape metrics "
                             "(default: %(default)s)")
    parser.add_argument("--monitoring", action="store_true",
                        help="add a prometheus-operator ServiceMonitor")
    parser.add_argument("--no-flow-control", dest="flow_control", action="store_false",
                        help="leave out the controller's FlowSchema and PriorityLevelConfiguration "
                             "(API Priority and Fairness), for clusters whose admins manage those")
    parser.add_argument("--native", action="store_true",
                        help="also ship the MutatingAdmissionPolicies (and bindings) that do the "
                             "injections CEL can express and add each batch Job kind's "
                             "podFailurePolicy fragment; the webhook is then not called for "
                             "what they do (docs/native.md)")
    parser.add_argument("--output-dir", metavar="DIR",
                        help="write one file per object and a kustomization.yaml here "
                             "(default: YAML on stdout)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        plan, text = inputs.load_plan_text([args.plan] if args.plan else args.rules)
        options = manifests.Options(
            image=args.image, certificates=_certificates(args), namespace=args.namespace,
            replicas=args.replicas, controller_replicas=args.controller_replicas,
            shards=args.shards,
            exclude_namespaces=tuple(args.namespace_exclude),
            network_policy=args.network_policy, metrics_namespace=args.metrics_namespace,
            monitoring=args.monitoring, flow_control=args.flow_control, native=args.native)
        objects = manifests.render(plan, text, options)
        if args.output_dir:
            _write_folder(Path(args.output_dir), objects)
    except (api.InputError, manifests.ManifestError) as err:
        print(f"rulec manifests: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"rulec manifests: {err.filename}: {err.strerror}", file=sys.stderr)
        return 2
    if not objects[-1]["webhooks"]:
        print("rulec manifests: warning: no injection in the plan; the webhook configuration "
              "registers no webhook", file=sys.stderr)
    if args.output_dir:
        print(f"rulec manifests: wrote {len(objects)} objects and {KUSTOMIZATION} to "
              f"{args.output_dir}", file=sys.stderr)
    else:
        sys.stdout.write(manifests.dump(objects))
    return 0


def _certificates(args: argparse.Namespace) -> manifests.Certificates:
    if args.ca_bundle:
        return manifests.UserCertificate(Path(args.ca_bundle).read_bytes())
    mode, _, issuer = args.certs.partition("=")
    if mode == "cert-manager":
        return manifests.CertManager(manifests.parse_issuer(issuer) if issuer else None)
    if mode == "self-managed" and not issuer:
        return manifests.SelfManaged()
    raise manifests.ManifestError(f"--certs {args.certs!r}: expected {CERT_MODES}, or --ca-bundle FILE")


def _write_folder(folder: Path, objects: list[manifests.Obj]) -> None:
    """Write the files; a folder that holds anything but an earlier output is left alone."""
    names = manifests.file_names(objects)
    stale = _earlier_output(folder)
    for path in stale:
        path.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    for name, obj in zip(names, objects):
        (folder / name).write_text(manifests.dump([obj]), encoding="utf-8")
    (folder / KUSTOMIZATION).write_text(manifests.dump([manifests.kustomization(names)]),
                                        encoding="utf-8")


def _earlier_output(folder: Path) -> list[Path]:
    """The files of an earlier `rulec manifests` in `folder` (to replace): nothing but a
    kustomization.yaml and files named as it names them. Anything else is an error."""
    if not folder.exists():
        return []
    if not folder.is_dir():
        raise manifests.ManifestError(f"{folder}: not a folder")
    present = set(os.listdir(folder))
    if present and (KUSTOMIZATION not in present
                    or not all(_OBJECT_FILE.match(name) for name in present - {KUSTOMIZATION})):
        raise manifests.ManifestError(
            f"{folder}: not empty and not an earlier `rulec manifests` output; give a new or "
            "empty folder")
    return [folder / name for name in sorted(present)]
