import pytest

from serve_app.auth import Principal, bearer_token, resolve_owner
from serve_app.errors import ApiError
from serve_app.store.keys import generate_key, hash_key

SERVICE = Principal("k1", "t1", "service")
USER = Principal("k2", "t1", "user", "alice")


def test_service_key_acts_for_named_user_of_its_tenant():
    owner = resolve_owner(SERVICE, "bob")
    assert (owner.tenant_id, owner.user_id) == ("t1", "bob")


def test_service_key_must_name_a_user():
    with pytest.raises(ApiError) as e:
        resolve_owner(SERVICE, None)
    assert e.value.status == 400


def test_user_key_bound_to_its_user():
    assert resolve_owner(USER, None).user_id == "alice"
    assert resolve_owner(USER, "alice").user_id == "alice"
    with pytest.raises(ApiError) as e:
        resolve_owner(USER, "bob")
    assert e.value.status == 403


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer ", "Bearer"])
def test_bad_authorization_headers(header):
    with pytest.raises(ApiError) as e:
        bearer_token(header)
    assert e.value.status == 401


def test_keys_are_random_and_hashed():
    a, b = generate_key(), generate_key()
    assert a != b and len(a) > 40
    assert hash_key(a) != a and len(hash_key(a)) == 64


def test_principal_carries_the_keys_own_rate():
    p = Principal("k", "t", "service", None, 2.5)
    assert p.rate_limit_per_s == 2.5 and SERVICE.rate_limit_per_s is None
