"""Schema fuzzing with schemathesis: every operation of /openapi.json, bounded examples.

Checks (schemathesis' defaults): no 5xx, documented status codes, content types
and response bodies that match the schema, invalid input rejected. Runs with
the service key of a fresh tenant so it cannot disturb other tests' data.
``positive_data_acceptance`` is left out: schema-valid bodies are still refused
by rules the schema cannot express (a service key must name user_id; a user
key may not name another user; a random UUID is not a memory).
"""

from __future__ import annotations

import secrets

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from tests.security.report import CASES, FINDINGS, SERVER_ERRORS

pytestmark = pytest.mark.e2e
EXAMPLES_PER_OPERATION = 20


@pytest.fixture(scope="module")
def fuzz_key(sec_service) -> str:
    tenant = "fuzz_" + secrets.token_hex(3)
    return sec_service.add_key("msk_" + secrets.token_hex(16), tenant, "service")


def fuzz_operation(op, base_url: str, headers: dict[str, str]):
    """A hypothesis test over one operation's generated cases."""

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy())
    def fuzz(case):
        CASES[f"schemathesis {op.label}"] += 1
        case.call_and_validate(
            base_url=base_url,
            headers=headers,
            excluded_checks=[positive_data_acceptance],
            timeout=60,
        )

    return fuzz


def test_openapi_fuzz(sec_service, fuzz_key):
    schema = schemathesis.openapi.from_url(f"{sec_service.base_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    headers = {"Authorization": f"Bearer {fuzz_key}"}
    failures: list[str] = []
    for op in operations:
        try:
            fuzz_operation(op, sec_service.base_url, headers)()
        except BaseException as exc:  # collect all operations' failures, then fail once
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{op.label}: {str(exc)[:2000]}")
    for failure in failures:  # schemathesis names a 5xx "Server error"
        (SERVER_ERRORS if "Server error" in failure else FINDINGS).append(failure[:300])
    assert not failures, "\n\n".join(failures)
