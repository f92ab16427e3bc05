"""Schema fuzzing with schemathesis: every operation of /openapi.json, bounded examples.

Checks: no 5xx, documented status codes, content types and response bodies that
match the schema, invalid input rejected. Runs with the service key of a fresh
tenant so it cannot disturb other tests' data. ``positive_data_acceptance`` is
left out: schema-valid bodies are still refused by rules the schema cannot say
(a service key must name user_id; a user key may not name another user).
"""

from __future__ import annotations

import secrets

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance

from tests.security.conftest import CASES, FINDINGS

pytestmark = pytest.mark.e2e
EXAMPLES_PER_OPERATION = 40


@pytest.fixture(scope="module")
def fuzz_key(sec_service) -> str:
    tenant = "fuzz_" + secrets.token_hex(3)
    return sec_service.add_key("msk_" + secrets.token_hex(16), tenant, "service")


@pytest.fixture(scope="module")
def api_schema(sec_service):
    return schemathesis.openapi.from_url(f"{sec_service.base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_openapi_fuzz(case, sec_service, fuzz_key):
    CASES[f"schemathesis {case.operation.label}"] += 1
    try:
        case.call_and_validate(
            base_url=sec_service.base_url,
            headers={"Authorization": f"Bearer {fuzz_key}"},
            excluded_checks=[positive_data_acceptance],
            timeout=60,
        )
    except Exception as exc:
        FINDINGS.append(f"schemathesis {case.operation.label}: {str(exc)[:300]}")
        raise
