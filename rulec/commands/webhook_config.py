"""`rulec webhook-config`: print the MutatingWebhookConfiguration that registers the webhook.

A thin shell over runtime.registration: read a plan, a target and a CA bundle, print YAML.
Exit 0 on success, 2 on unusable input (the CLI's usage/IO convention).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from rulec import api
from rulec.commands import inputs
from runtime import plan as planlib
from runtime import registration


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "webhook-config",
        help="print the MutatingWebhookConfiguration for a plan",
        description="Print, as YAML, the MutatingWebhookConfiguration that makes the API server "
                    "call the jobrules webhook for pods owned by a kind that an injection names.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--plan", metavar="FILE", help="a compiled plan (rulec compile)")
    source.add_argument("--rules", metavar="PATH", nargs="+",
                        help=".rules files or folders, compiled on the fly")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="https URL the API server calls (webhook outside the cluster)")
    target.add_argument("--service", metavar="NS/NAME[:PORT][/PATH]",
                        help=f"in-cluster Service (default port 443, path {registration.MUTATE_PATH}); "
                             "its namespace is excluded from the webhook")
    parser.add_argument("--ca-bundle", metavar="FILE",
                        help="PEM CA that signed the webhook's certificate (omit when a CA injector "
                             "fills caBundle)")
    parser.add_argument("--namespace-exclude", metavar="NS", action="append", default=[],
                        help="a namespace whose pods are never sent (repeatable; kube-system always is)")
    parser.add_argument("--name", default=registration.DEFAULT_NAME,
                        help="name of the configuration object (default: %(default)s)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        plan = _plan(args)
        target: registration.Target = (registration.Url(args.url) if args.url is not None
                                       else registration.parse_service(args.service))
        ca = Path(args.ca_bundle).read_bytes() if args.ca_bundle else None
        config = registration.render(plan, target, ca, name=args.name,
                                     exclude_namespaces=args.namespace_exclude)
    except (planlib.PlanError, api.InputError, registration.RegistrationError) as err:
        print(f"rulec webhook-config: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"rulec webhook-config: {err.filename}: {err.strerror}", file=sys.stderr)
        return 2
    if not config["webhooks"]:
        print("rulec webhook-config: warning: no injection in the plan; the configuration "
              "registers no webhook", file=sys.stderr)
    sys.stdout.write(yaml.safe_dump(config, sort_keys=False))
    return 0


def _plan(args: argparse.Namespace) -> planlib.Plan:
    return planlib.load_file(args.plan) if args.plan else inputs.load_plan(args.rules)
