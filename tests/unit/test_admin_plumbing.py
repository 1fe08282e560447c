"""The admin mixins' shared pieces (admin/plumbing.py): the name check and the group describe call."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import GroupCoordinator, NoRetry
from kafka_handoff.admin.plumbing import group_describe_call, unique_names
from kafka_handoff.errors import CoordinatorLoadInProgressError, GroupAuthorizationFailedError
from kafka_handoff.protocol.versions import ApiKey

pytestmark = pytest.mark.unit


def test_unique_names_takes_one_string_as_one_name_and_refuses_repeats_and_blanks() -> None:
    assert unique_names("t", "topic") == ["t"]
    assert unique_names(iter(["a", "b"]), "topic") == ["a", "b"]
    with pytest.raises(ValueError, match="group 'a' is given more than once"):
        unique_names(["a", "a"], "group")
    with pytest.raises(ValueError, match="topic names must be non-empty strings, got ''"):
        unique_names(["a", ""], "topic")


def _response(group_id: str, code: int, message: str | None = None) -> Any:
    other = SimpleNamespace(group_id="other", error_code=ErrorCode.none, error_message=None)
    group = SimpleNamespace(group_id=group_id, error_code=code, error_message=message)
    return SimpleNamespace(groups=[other, group])


def _call(not_found: Any = lambda: "absent") -> Any:
    return group_describe_call(
        "ShareGroupDescribe",
        ApiKey.SHARE_GROUP_DESCRIBE,
        "g",
        1000,
        what="share group",
        describe=lambda g, node: (g.group_id, node),
        not_found=not_found,
    )


def test_group_describe_call_goes_to_the_coordinator_and_describes_its_group() -> None:
    call = _call()
    assert call.name == "ShareGroupDescribe(group 'g')"
    assert call.api_key == ApiKey.SHARE_GROUP_DESCRIBE and call.target == GroupCoordinator("g")
    assert call.build(1, 500) == {"group_ids": ["g"], "include_authorized_operations": False}
    assert call.handle(_response("g", ErrorCode.none), 1, 7) == ("g", 7)
    assert call.handle(_response("g", ErrorCode.group_id_not_found), 1, 7) == "absent"


def test_group_describe_call_retries_retriable_errors_and_fails_the_others_at_once() -> None:
    call = _call()
    with pytest.raises(CoordinatorLoadInProgressError):
        call.handle(_response("g", ErrorCode.coordinator_load_in_progress), 1, 7)
    with pytest.raises(NoRetry) as caught:
        call.handle(_response("g", ErrorCode.group_authorization_failed, "denied"), 1, 7)
    error = caught.value.error
    assert isinstance(error, GroupAuthorizationFailedError)
    assert (
        "cannot describe share group 'g': denied: the principal is not allowed DESCRIBE on GROUP 'g'"
        in str(error)
    )
    assert (error.operation, error.resource_type, error.resource_name) == ("DESCRIBE", "GROUP", "g")
