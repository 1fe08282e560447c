"""``handoff configs describe|set|delete``: read and change the configuration of a topic, a broker (or the
cluster-wide broker default) or a group, with incremental changes (IncrementalAlterConfigs: configs not
named keep their values).

Name the entity as Kafka's ``kafka-configs`` does (``--entity-type topics --entity-name orders``) or with
``--topic``/``--broker``/``--broker-defaults``/``--group``.  ``set`` takes ``--add-config k=v[,k=v]`` (or
``--config k=v``, repeatable); ``delete`` takes ``--delete-config k[,k]`` (back to the default).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, add_json_arg, console, print_json, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient, ConfigResource

_ENTITY_TYPES = {"topics": "TOPIC", "brokers": "BROKER", "groups": "GROUP", "broker-loggers": "BROKER_LOGGER"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "configs",
        help="describe and change topic, broker and group configs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="configs_action", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="the configs of an entity (those set, or --all)")
    _entity_args(describe)
    describe.add_argument("--all", action="store_true", help="also the defaults")
    add_json_arg(describe)
    add_connection_args(describe)
    describe.set_defaults(func=cmd_describe)

    set_ = actions.add_parser("set", help="set configs (others keep their values)")
    _entity_args(set_)
    set_.add_argument("--add-config", "--config", "-c", dest="add", action="append", required=True,
                      metavar="K=V[,K=V]")  # fmt: skip
    set_.add_argument("--validate-only", action="store_true", help="only ask the broker to validate")
    add_connection_args(set_)
    set_.set_defaults(func=cmd_set)

    delete = actions.add_parser("delete", help="delete configs (back to their defaults)")
    _entity_args(delete)
    delete.add_argument("--delete-config", "--config", "-c", dest="delete", action="append", required=True,
                        metavar="K[,K]")  # fmt: skip
    add_connection_args(delete)
    delete.set_defaults(func=cmd_delete)


def _entity_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--entity-type", choices=sorted(_ENTITY_TYPES), help="as kafka-configs")
    parser.add_argument("--entity-name", help="as kafka-configs")
    parser.add_argument("--topic", "-t")
    parser.add_argument("--broker", metavar="ID")
    parser.add_argument("--broker-defaults", action="store_true", help="the cluster-wide broker default")
    parser.add_argument("--group", "-g")


def resource_of(args: argparse.Namespace) -> ConfigResource:
    from kafka_handoff.admin import ConfigResource, ConfigResourceType

    given = [
        (kind, name)
        for kind, name in (
            ("TOPIC", args.topic),
            ("BROKER", args.broker),
            ("BROKER", "" if args.broker_defaults else None),
            ("GROUP", args.group),
            (_ENTITY_TYPES.get(args.entity_type or ""), args.entity_name),
        )
        if kind is not None and name is not None
    ]
    if args.entity_type == "brokers" and args.entity_name is None:
        given.append(("BROKER", ""))
    if len(given) != 1:
        raise ValueError(
            "name one entity: --topic T, --broker ID, --broker-defaults, --group G or "
            "--entity-type/--entity-name"
        )
    kind, name = given[0]
    return ConfigResource(ConfigResourceType[kind], name)


def _pairs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"--add-config {part!r} is not KEY=VALUE")
            out[key.strip()] = value.strip()
    return out


def _usage_error(args: argparse.Namespace, exc: Exception) -> int:
    print(f"handoff configs {args.configs_action}: {exc}", file=sys.stderr)
    return 2


def cmd_describe(args: argparse.Namespace) -> int:
    from rich.table import Table

    try:
        resource = resource_of(args)
    except ValueError as exc:
        return _usage_error(args, exc)

    def action(admin: AdminClient) -> int:
        entries = admin.describe_configs([resource], timeout=args.timeout)[resource.name]
        shown = {k: e for k, e in sorted(entries.items()) if args.all or not e.is_default}
        if args.json:
            print_json(
                {
                    k: {
                        "value": None if e.sensitive else e.value,
                        "source": e.source,
                        "read_only": e.read_only,
                        "sensitive": e.sensitive,
                    }
                    for k, e in shown.items()
                }
            )
            return 0
        what = "" if args.all else " that are not defaults"
        table = Table(title=f"configs of {resource}{what}", title_justify="left")
        table.add_column("config", no_wrap=True)
        table.add_column("value")
        table.add_column("source")
        for k, e in shown.items():
            table.add_row(k, "(sensitive)" if e.sensitive else str(e.value), e.source)
        console().print(table)
        return 0

    return run_admin(args, action)


def cmd_set(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import AlterConfigOp

    try:
        resource = resource_of(args)
        values = _pairs(args.add)
    except ValueError as exc:
        return _usage_error(args, exc)

    def action(admin: AdminClient) -> int:
        ops = [AlterConfigOp(k, v) for k, v in values.items()]
        admin.incremental_alter_configs(
            {resource: ops}, validate_only=args.validate_only, timeout=args.timeout
        )
        verb = "valid for" if args.validate_only else "set on"
        print(f"{verb} {resource}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
        return 0

    return run_admin(args, action)


def cmd_delete(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import AlterConfigOp, AlterConfigOpType

    try:
        resource = resource_of(args)
    except ValueError as exc:
        return _usage_error(args, exc)
    names = [n.strip() for item in args.delete for n in item.split(",") if n.strip()]

    def action(admin: AdminClient) -> int:
        ops = [AlterConfigOp(n, op_type=AlterConfigOpType.DELETE) for n in names]
        admin.incremental_alter_configs({resource: ops}, timeout=args.timeout)
        print(f"deleted from {resource}: {', '.join(names)}")
        return 0

    return run_admin(args, action)
