"""Protobuf message types for the Schema Registry tests, built from descriptors (no protoc needed):
``common/money.proto`` (``Money``) and ``shop/order.proto`` importing it (``Order`` with a nested ``Line``,
and ``Refund``, the file's second message: message indexes ``[0]``, ``[0, 0]`` and ``[1]``)."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def _field(msg: Any, name: str, number: int, kind: int, type_name: str = "", repeated: bool = False) -> None:
    f = msg.field.add()
    f.name, f.number, f.type = name, number, kind
    f.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
    if type_name:
        f.type_name = type_name


def _build() -> tuple[Any, Any, Any, Any, Any]:
    pool = descriptor_pool.Default()
    money = descriptor_pb2.FileDescriptorProto(
        name="common/money.proto", package="kh.common", syntax="proto3"
    )
    m = money.message_type.add(name="Money")
    _field(m, "currency", 1, F.TYPE_STRING)
    _field(m, "units", 2, F.TYPE_INT64)
    order = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="kh.shop", syntax="proto3")
    order.dependency.append("common/money.proto")
    o = order.message_type.add(name="Order")
    _field(o, "id", 1, F.TYPE_STRING)
    _field(o, "total", 2, F.TYPE_MESSAGE, ".kh.common.Money")
    line = o.nested_type.add(name="Line")
    _field(line, "sku", 1, F.TYPE_STRING)
    _field(line, "qty", 2, F.TYPE_INT32)
    _field(o, "lines", 3, F.TYPE_MESSAGE, ".kh.shop.Order.Line", repeated=True)
    r = order.message_type.add(name="Refund")
    _field(r, "order_id", 1, F.TYPE_STRING)
    _field(r, "reason", 2, F.TYPE_STRING)
    try:
        pool.FindFileByName("shop/order.proto")
    except KeyError:
        pool.AddSerializedFile(money.SerializeToString())
        pool.AddSerializedFile(order.SerializeToString())
    get = message_factory.GetMessageClass
    order_desc = pool.FindMessageTypeByName("kh.shop.Order")
    return (
        get(pool.FindMessageTypeByName("kh.common.Money")),
        get(order_desc),
        get(order_desc.nested_types_by_name["Line"]),
        get(pool.FindMessageTypeByName("kh.shop.Refund")),
        order_desc,
    )


Money, Order, OrderLine, Refund, ORDER_DESCRIPTOR = _build()
