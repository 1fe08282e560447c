"""``handoff users describe|scram-set|scram-delete``: SCRAM credentials of SASL users (Kafka's
``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``).  The password is
read from ``--password-stdin`` or prompted for, never taken on the command line (it would show in ``ps``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, add_json_arg, print_rows, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient

_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("users", help="SCRAM credentials of SASL users", description=__doc__)
    actions = parser.add_subparsers(dest="users_action", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="users' SCRAM mechanisms and iterations")
    describe.add_argument("--user", action="append", default=None, help="repeatable (default: every user)")
    add_json_arg(describe)
    add_connection_args(describe)
    describe.set_defaults(func=cmd_describe)

    set_ = actions.add_parser("scram-set", help="set a user's SCRAM password (creates the user)")
    set_.add_argument("--user", required=True)
    set_.add_argument("--mechanism", choices=_MECHANISMS, default="SCRAM-SHA-256")
    set_.add_argument("--iterations", type=int, default=8192, help="at least 4096 (default 8192)")
    set_.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    add_connection_args(set_)
    set_.set_defaults(func=cmd_set)

    delete = actions.add_parser("scram-delete", help="delete a user's SCRAM credential for a mechanism")
    delete.add_argument("--user", required=True)
    delete.add_argument("--mechanism", choices=_MECHANISMS, default="SCRAM-SHA-256")
    add_connection_args(delete)
    delete.set_defaults(func=cmd_delete)


def _mechanism(name: str) -> Any:
    from kafka_handoff.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def cmd_describe(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        users = admin.describe_user_scram_credentials(args.user, timeout=args.timeout)
        rows = [
            {"user": u, "mechanism": c.mechanism.mechanism_name, "iterations": c.iterations}
            for u, d in users.items()
            for c in d.credential_infos
        ]
        print_rows(
            rows,
            title=f"{len(users)} SCRAM user(s)",
            columns=("user", "mechanism", "iterations"),
            as_json=args.json,
        )
        return 0

    return run_admin(args, action)


def cmd_set(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        import getpass

        password = getpass.getpass(f"password for {args.user}: ")
    if not password:
        print("handoff users scram-set: empty password", file=sys.stderr)
        return 2
    info = ScramCredentialInfo(_mechanism(args.mechanism), args.iterations)

    def action(admin: AdminClient) -> int:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(args.user, info, password)], timeout=args.timeout
        )
        print(f"set the {args.mechanism} credential of user {args.user} ({args.iterations} iterations)")
        return 0

    return run_admin(args, action)


def cmd_delete(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import UserScramCredentialDeletion

    def action(admin: AdminClient) -> int:
        admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(args.user, _mechanism(args.mechanism))], timeout=args.timeout
        )
        print(f"deleted the {args.mechanism} credential of user {args.user}")
        return 0

    return run_admin(args, action)
