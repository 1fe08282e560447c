"""``handoff broker start|stop|status|fetch-jars``: a real Kafka broker in the background.

Brokers started here are detached: they keep running after the command returns, until
``handoff broker stop`` (same ``--data-dir``).  Several can run side by side with different data dirs.

Per-node fault injection on a running cluster (``start --nodes 3``), node ids 1..3:

* ``stop-node N``    SIGTERM and wait (a clean shutdown; a *controlled* one -- leaders moved away first --
  when the cluster was started with ``--override controlled.shutdown.enable=true``); SIGKILL after --timeout
* ``kill-node N``    SIGKILL (``kill -9``: a crash)
* ``restart-node N`` stop it (SIGTERM, or SIGKILL with ``--kill``) if it runs, start it again on the same
  storage and ports, and wait until it serves Metadata
* ``pause-node N`` / ``resume-node N``  SIGSTOP / SIGCONT (a hung broker: connections stay open, nothing
  is answered)

``--security ssl|mtls|sasl_plaintext|sasl_ssl|all`` adds secured listeners (throwaway CA and
certificates, SASL users for PLAIN and SCRAM, OAUTHBEARER against a local token endpoint) and writes
every setting a client needs, in librdkafka's names, to DATA_DIR/client.json (printed on its own line);
DATA_DIR/client-<mode>[-<mechanism>].json hold each listener's and mechanism's.

``--schema-registry`` also starts a Confluent-compatible Schema Registry (Apicurio Registry, in-memory, built
from Maven Central by ``make setup``/``handoff broker fetch-jars``) beside the broker, prints its URL and adds
``schema.registry.url`` to DATA_DIR/client.json; ``handoff broker stop`` stops it too.

``--security kerberos`` (not part of ``all``) adds a SASL_PLAINTEXT listener with GSSAPI and starts a
throwaway MIT Kerberos KDC on 127.0.0.1 beside the broker (stopped with it); clients need
``KRB5_CONFIG=DATA_DIR/security/kdc/krb5.conf`` (printed).  ``handoff broker setup-kerberos`` installs the
KDC packages (krb5-kdc, krb5-admin-server, krb5-user) with apt-get when they are missing; ``make setup``
runs it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_DATA_DIR = Path(".handoff") / "broker"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="start/stop/inspect a local Apache Kafka broker (KRaft) for tests and demos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="broker_action", metavar="ACTION", required=True)

    start = actions.add_parser(
        "start", help="start a broker in the background and print its bootstrap servers"
    )
    start.add_argument("--nodes", type=int, choices=(1, 3), default=1, help="1 broker, or a 3-node cluster")
    _data_dir_arg(start)
    start.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    start.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting (dotted Kafka name) on every node; repeatable",
    )
    start.add_argument(
        "--security",
        choices=("ssl", "mtls", "sasl_plaintext", "sasl_ssl", "all", "kerberos"),
        default=None,
        help="add secured listeners (beside PLAINTEXT) and write DATA_DIR/client.json for this mode",
    )
    start.add_argument(
        "--reauth-ms",
        type=int,
        default=None,
        metavar="MS",
        help="connections.max.reauth.ms of the SASL listeners (KIP-368 re-authentication)",
    )
    start.add_argument(
        "--schema-registry",
        action="store_true",
        help="also start a Confluent-compatible Schema Registry; print its URL, add it to client.json",
    )
    start.set_defaults(func=cmd_start)

    stop = actions.add_parser("stop", help="stop the broker (SIGTERM, SIGKILL after --timeout)")
    _data_dir_arg(stop)
    stop.add_argument("--timeout", type=float, default=10.0, help="seconds before SIGKILL")
    stop.set_defaults(func=cmd_stop)

    status = actions.add_parser("status", help="show whether the broker runs (exit 0 if it does, 1 if not)")
    _data_dir_arg(status)
    status.set_defaults(func=cmd_status)

    node_actions = {
        "stop-node": "stop one node: SIGTERM and wait (SIGKILL after --timeout)",
        "kill-node": "kill one node with SIGKILL (a crash)",
        "restart-node": "stop one node if it runs, start it again, wait until it serves clients",
        "pause-node": "SIGSTOP one node (a hung broker)",
        "resume-node": "SIGCONT a paused node",
    }
    for name, text in node_actions.items():
        node_parser = actions.add_parser(name, help=text)
        node_parser.add_argument("node", type=int, metavar="N", help="node id (1..3)")
        _data_dir_arg(node_parser)
        if name in ("stop-node", "restart-node"):
            node_parser.add_argument(
                "--timeout", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL"
            )
        if name == "restart-node":
            node_parser.add_argument("--kill", action="store_true", help="stop it with SIGKILL")
            node_parser.add_argument(
                "--start-timeout", type=float, default=120.0, help="seconds to wait for readiness"
            )
        node_parser.set_defaults(func=cmd_node, node_action=name)

    fetch = actions.add_parser("fetch-jars", help="resolve the Kafka jars from Maven Central (once)")
    fetch.add_argument(
        "--schema-registry",
        action="store_true",
        help="also build the dev Schema Registry (Apicurio, from Maven Central; minutes the first time)",
    )
    fetch.set_defaults(func=cmd_fetch_jars)
    kerberos = actions.add_parser(
        "setup-kerberos", help="install MIT Kerberos (KDC, kadmin.local, kinit) for --security kerberos"
    )
    kerberos.set_defaults(func=cmd_setup_kerberos)


def _data_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"where the broker keeps its state, storage and logs (default: {DEFAULT_DATA_DIR})",
    )


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def cmd_fetch_jars(args: argparse.Namespace) -> int:
    from kafka_handoff import devbroker

    try:
        jars = devbroker.ensure_jars()
    except devbroker.JarResolutionError as exc:
        _err(f"handoff: {exc}")
        return 1
    how = "resolved with Maven" if jars.resolved_now else "already cached"
    print(f"Kafka {jars.version} jars {how} in {jars.seconds:.1f}s: {jars.libs}")
    if getattr(args, "schema_registry", False) and not _prepare_registry():
        return 1
    from kafka_handoff.devbroker import cds, config
    from kafka_handoff.devbroker.cluster import ensure_cds_archive

    java = config.java_executable()
    if cds.archive_path(jars, java).is_file():
        return 0
    started = time.monotonic()
    archive = ensure_cds_archive(jars, java)
    if archive is not None:
        print(f"broker class-data-sharing archive trained in {time.monotonic() - started:.1f}s: {archive}")
    else:
        print("broker class-data-sharing archive unavailable (brokers start a little slower)")
    return 0


def _prepare_registry() -> bool:
    """Build the dev Schema Registry once (``--schema-registry``, the ``schema_registry`` test fixture).  A
    failure is an error under CI=true, else a note (the registry's tests then skip)."""
    import os

    from kafka_handoff.devbroker import registry

    try:
        prepared = registry.ensure_registry()
    except devbroker_errors() as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            _err(f"handoff: the Schema Registry cannot be prepared: {exc}")
            return False
        _err(f"note: the Schema Registry cannot be prepared ({exc}); --schema-registry is unavailable")
        return True
    how = "built with Maven" if prepared.built_now else "already built"
    print(
        f"Schema Registry (Apicurio {prepared.version}) {how} in {prepared.seconds:.1f}s: {prepared.app_dir}"
    )
    return True


def devbroker_errors() -> tuple[type[BaseException], ...]:
    from kafka_handoff.devbroker.jars import JarResolutionError
    from kafka_handoff.errors import KafkaError

    return (JarResolutionError, KafkaError, OSError)


def cmd_setup_kerberos(args: argparse.Namespace) -> int:
    """Install the KDC packages when missing (idempotent); under CI=true a failure is an error, else a
    note (GSSAPI and --security kerberos are then unavailable)."""
    import os

    from kafka_handoff.devbroker import kdc

    if kdc.ensure_packages():
        print(f"MIT Kerberos ready: {', '.join(kdc.kdc_binaries().values())}")
        return 0
    missing = ", ".join(kdc.missing_binaries())
    message = (
        f"MIT Kerberos is not installed ({missing} missing) and apt-get as root is not available: install "
        f"{' '.join(kdc.PACKAGES)} libkrb5-dev"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        _err(f"handoff: {message}")
        return 1
    _err(f"note: {message}; GSSAPI and --security kerberos are unavailable until then")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from kafka_handoff import devbroker
    from kafka_handoff.devbroker.registry import RegistryStartError
    from kafka_handoff.errors import ConfigError

    overrides: dict[str, str] = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            _err(f"handoff: --override {item!r}: expected KEY=VALUE")
            return 2
        overrides[key.strip()] = value
    started = time.monotonic()
    if args.reauth_ms is not None and args.security is None:
        _err("handoff: --reauth-ms needs --security")
        return 2
    try:
        cluster = devbroker.start(
            args.nodes,
            args.data_dir,
            supervised=False,
            timeout=args.timeout,
            security=args.security,
            connections_max_reauth_ms=args.reauth_ms,
            overrides=overrides,
            schema_registry=args.schema_registry,
        )
    except ConfigError as exc:
        _err(f"handoff: {exc}")
        return 2
    except devbroker.BrokerAlreadyRunningError as exc:
        _err(f"handoff: {exc}")
        print(exc.bootstrap_servers)
        return 0
    except (devbroker.BrokerStartError, devbroker.JarResolutionError, RegistryStartError) as exc:
        _err(f"handoff: {exc}")
        return 1
    print(cluster.bootstrap_servers)
    # The next handoff command (and HANDOFF_BOOTSTRAP-aware tests) find the broker through this variable.
    _err(f"export HANDOFF_BOOTSTRAP={cluster.bootstrap_servers}")
    if cluster.security is not None:
        print(cluster.security.client_json_path())
        for mode in cluster.security.modes:
            _err(f"  {mode}: {cluster.security.bootstrap(mode)}  ({cluster.security.client_json_path(mode)})")
        if cluster.security.krb5_conf is not None:
            _err(f"export KRB5_CONFIG={cluster.security.krb5_conf}  # for Kerberos clients (GSSAPI)")
    if cluster.schema_registry is not None:
        print(cluster.schema_registry.url)
        _err(
            f"Schema Registry (Apicurio, Confluent API) at {cluster.schema_registry.url}, ready in "
            f"{cluster.schema_registry.start_seconds:.1f}s; schema.registry.url added to "
            f"{cluster.data_dir / 'client.json'}"
        )
    _err(
        f"Kafka {cluster.kafka_version}, {len(cluster.nodes)} node(s), ready in "
        f"{time.monotonic() - started:.1f}s (JVM start to ready {cluster.start_seconds:.1f}s); "
        f"data and logs in {cluster.data_dir}; stop with: handoff broker stop --data-dir {args.data_dir}"
    )
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from kafka_handoff import devbroker

    started = time.monotonic()
    if devbroker.stop(args.data_dir, timeout=args.timeout):
        _err(f"broker in {args.data_dir} stopped in {time.monotonic() - started:.1f}s")
    else:
        _err(f"no broker recorded in {args.data_dir}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from kafka_handoff import devbroker

    state = devbroker.status(args.data_dir)
    if state is None:
        print(f"not running (no broker recorded in {args.data_dir})")
        return 1
    word = "running" if state.all_running else ("degraded" if state.running else "not running")
    print(f"{word}: Kafka {state.kafka_version}, cluster id {state.cluster_id}, data dir {state.data_dir}")
    print(f"bootstrap servers: {state.bootstrap_servers}")
    for node in state.nodes:
        word = "paused" if node.paused else ("up" if node.alive else "down")
        print(f"  node {node.node_id}  {node.bootstrap}  pid {node.pid}  {word}")
    from kafka_handoff.devbroker import security

    sec = security.load(args.data_dir)
    if sec is not None:
        for mode in sec.modes:
            print(f"{mode}: {sec.bootstrap(mode)}  settings: {sec.client_json_path(mode)}")
    from kafka_handoff.devbroker import registry
    from kafka_handoff.devbroker._procs import pid_alive
    from kafka_handoff.devbroker.cluster import REGISTRY_DIR

    registry_state = registry.registry_state(Path(args.data_dir) / REGISTRY_DIR)
    if registry_state is not None:
        pid = registry_state.get("pid")
        alive = isinstance(pid, int) and pid_alive(pid)
        print(f"schema registry: {registry_state.get('url')}  pid {pid}  {'up' if alive else 'down'}")
    return 0 if state.running else 1


def cmd_node(args: argparse.Namespace) -> int:
    from kafka_handoff import devbroker

    try:
        cluster = devbroker.attach(args.data_dir)
        cluster.node(args.node)
    except devbroker.BrokerStartError as exc:
        _err(f"handoff: {exc}")
        return 1
    except KeyError:
        _err(f"handoff: node: {args.node} is not a node of this cluster (nodes: {cluster.node_ids})")
        return 2
    action: str = args.node_action
    node = args.node
    started = time.monotonic()
    try:
        if action in ("stop-node", "kill-node"):
            if not cluster.is_alive(node):
                _err(f"node {node} is not running")
                return 0
            if action == "kill-node":
                cluster.kill_node(node)
            else:
                cluster.stop_node(node, timeout=args.timeout)
        elif action == "restart-node":
            if cluster.is_alive(node):
                cluster.stop_node(node, kill=args.kill, timeout=args.timeout)
            cluster.restart_node(node, timeout=args.start_timeout)
        elif action in ("pause-node", "resume-node"):
            if not cluster.is_alive(node):
                _err(f"handoff: node {node} is not running")
                return 1
            if action == "pause-node":
                cluster.pause_node(node)
            else:
                cluster.resume_node(node)
    except (devbroker.BrokerStartError, devbroker.JarResolutionError) as exc:
        _err(f"handoff: {exc}")
        return 1
    _err(f"node {node}: {action} done in {time.monotonic() - started:.1f}s")
    return 0
