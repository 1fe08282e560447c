"""``handoff bench hostile`` runs its broker-free cases in processes of their own and reports the error the
application saw with the peak RSS (the zstd bomb case needs a broker: run by the bench itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_handoff.bench import hostile

pytestmark = pytest.mark.threads


def test_oversized_frame_and_slow_drip_cases_report_the_error_and_rss(tmp_path: Path) -> None:
    code = hostile.main(["--cases", "oversized-frame,slow-drip-oidc", "--out", str(tmp_path)])
    assert code == 0
    cases = {c["case"]: c for c in json.loads((tmp_path / "hostile.json").read_text())["cases"]}
    frame = cases["oversized-frame"]
    assert frame["error_type"] == "SslError" and "is this a TLS port?" in frame["error"]
    oidc = cases["slow-drip-oidc"]
    assert oidc["error_type"] == "AuthenticationError" and "did not answer within 4 s" in oidc["error"]
    for case in cases.values():
        assert 0 < case["rss_before_mib"] <= case["peak_rss_mib"]


def test_unknown_cases_are_refused_naming_the_allowed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert hostile.main(["--cases", "nope"]) == 2
    assert "zstd-bomb, oversized-frame, slow-drip-oidc" in capsys.readouterr().err
