"""``handoff acls list|add|remove``: ACLs, with the flags of Kafka's ``kafka-acls``.

``add --allow-principal User:alice --operation Read --topic orders`` (or ``--deny-principal``; ``--group``,
``--cluster``, ``--transactional-id``; ``--resource-pattern-type prefixed``; ``--host``).  ``list`` and
``remove`` take the same flags as filters (what is not given matches everything).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, add_json_arg, console, print_json, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AclBinding, AclBindingFilter, AdminClient

_OPERATIONS = (
    "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
    "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens", "TwoPhaseCommit",
)  # fmt: skip


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "acls",
        help="list, add and remove ACLs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="acls_action", metavar="ACTION", required=True)
    for name, text, func in (
        ("list", "the ACLs matching the filter flags (all by default)", cmd_list),
        ("add", "add ACLs: each principal x operation on the resource", cmd_add),
        ("remove", "remove the ACLs matching the flags", cmd_remove),
    ):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("--topic", "-t")
        sub.add_argument("--group", "-g")
        sub.add_argument("--cluster", action="store_true")
        sub.add_argument("--transactional-id")
        sub.add_argument(
            "--resource-pattern-type",
            choices=("literal", "prefixed", "match", "any"),
            default=None,
            help="literal (default for add), prefixed; for list/remove also match, any (default)",
        )
        sub.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        sub.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        sub.add_argument("--principal", action="append", default=[], metavar="User:NAME", help="either kind")
        sub.add_argument("--host", default=None, help="default: * (add), any (list/remove)")
        sub.add_argument("--operation", action="append", default=[], choices=_OPERATIONS)
        if name != "add":
            add_json_arg(sub)
        add_connection_args(sub)
        sub.set_defaults(func=func)


def _resource(args: argparse.Namespace, adding: bool) -> tuple[Any, str | None]:
    from kafka_handoff.admin import ResourceType

    given = [
        (t, n)
        for t, n in (
            (ResourceType.TOPIC, args.topic),
            (ResourceType.GROUP, args.group),
            (ResourceType.CLUSTER, "kafka-cluster" if args.cluster else None),
            (ResourceType.TRANSACTIONAL_ID, args.transactional_id),
        )
        if n is not None
    ]
    if len(given) > 1:
        raise ValueError("name one resource: --topic, --group, --cluster or --transactional-id")
    if not given:
        if adding:
            raise ValueError("name the resource: --topic, --group, --cluster or --transactional-id")
        return ResourceType.ANY, None
    return given[0]


def _operation(name: str) -> Any:
    from kafka_handoff.admin import AclOperation

    snake = "".join(f"_{c}" if c.isupper() else c for c in name).lstrip("_").upper()
    return AclOperation[snake]


def _filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    from kafka_handoff.admin import AclBindingFilter, AclOperation, AclPermissionType, PatternType

    rtype, name = _resource(args, adding=False)
    pattern = PatternType[(args.resource_pattern_type or "any").upper()]
    principals: list[tuple[str | None, AclPermissionType]] = [
        *((p, AclPermissionType.ALLOW) for p in args.allow_principal),
        *((p, AclPermissionType.DENY) for p in args.deny_principal),
        *((p, AclPermissionType.ANY) for p in args.principal),
    ] or [(None, AclPermissionType.ANY)]
    operations = [_operation(o) for o in args.operation] or [AclOperation.ANY]
    return [
        AclBindingFilter(rtype, name, pattern, principal, args.host, op, perm)
        for principal, perm in principals
        for op in operations
    ]


def _rows(bindings: list[AclBinding]) -> list[dict[str, str]]:
    return [
        {
            "resource_type": b.pattern.resource_type.name,
            "name": b.pattern.name,
            "pattern_type": b.pattern.pattern_type.name,
            "principal": b.entry.principal,
            "host": b.entry.host,
            "operation": b.entry.operation.name,
            "permission_type": b.entry.permission_type.name,
        }
        for b in bindings
    ]


def _print(args: argparse.Namespace, bindings: list[AclBinding], title: str) -> None:
    from rich.table import Table

    if getattr(args, "json", False):
        print_json(_rows(bindings))
        return
    table = Table(title=f"{title}: {len(bindings)} ACL(s)", title_justify="left")
    for column in ("resource", "name", "pattern", "principal", "host", "operation", "permission"):
        table.add_column(column)
    for row in _rows(bindings):
        table.add_row(*row.values())
    console().print(table)


def _usage(args: argparse.Namespace, exc: Exception) -> int:
    print(f"handoff acls {args.acls_action}: {exc}", file=sys.stderr)
    return 2


def cmd_list(args: argparse.Namespace) -> int:
    try:
        filters = _filters(args)
    except (ValueError, KeyError) as exc:
        return _usage(args, exc)

    def action(admin: AdminClient) -> int:
        found: dict[str, AclBinding] = {}
        for f in filters:
            for b in admin.describe_acls(f, timeout=args.timeout):
                found[str(b)] = b
        _print(args, [found[k] for k in sorted(found)], "ACLs")
        return 0

    return run_admin(args, action)


def cmd_add(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import (
        AccessControlEntry,
        AclBinding,
        AclPermissionType,
        PatternType,
        ResourcePattern,
    )

    try:
        rtype, name = _resource(args, adding=True)
        pattern_name = (args.resource_pattern_type or "literal").upper()
        if pattern_name not in ("LITERAL", "PREFIXED"):
            raise ValueError("--resource-pattern-type of an ACL to add is literal or prefixed")
        if not args.operation:
            raise ValueError("name the operations: --operation Read (repeatable)")
        principals = [(p, AclPermissionType.ALLOW) for p in args.allow_principal] + [
            (p, AclPermissionType.DENY) for p in args.deny_principal
        ]
        if not principals:
            raise ValueError("name the principals: --allow-principal User:NAME or --deny-principal User:NAME")
        bindings = [
            AclBinding(
                ResourcePattern(rtype, name or "", PatternType[pattern_name]),
                AccessControlEntry(p, args.host or "*", _operation(op), perm),
            )
            for p, perm in principals
            for op in args.operation
        ]
    except (ValueError, KeyError) as exc:
        return _usage(args, exc)

    def action(admin: AdminClient) -> int:
        admin.create_acls(bindings, timeout=args.timeout)
        for b in bindings:
            print(f"added ACL: {b}")
        return 0

    return run_admin(args, action)


def cmd_remove(args: argparse.Namespace) -> int:
    try:
        filters = _filters(args)
    except (ValueError, KeyError) as exc:
        return _usage(args, exc)

    def action(admin: AdminClient) -> int:
        deleted = admin.delete_acls(filters, timeout=args.timeout)
        _print(args, deleted, "removed")
        return 0

    return run_admin(args, action)
