"""Private-network delivery is the deployment's decision (issue 11 item 3), on both backends.

`SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS` / `SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS` decide; a destination's
`allowPrivateNetwork` can only narrow that (it is the tenant's opt-in), never widen it; cloud metadata ranges stay
blocked whatever the settings. No workers run here: these destinations are only saved, never sent to.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from settlekit.api.app import create_app
from settlekit.application.destinations import DestinationPolicy
from settlekit.delivery.signing import generate_secret
from settlekit.errors import ConfigurationError
from settlekit.events.envelope import Signer
from settlekit.runtime import Settings, Workers
from settlekit.store import deliveries as store
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app

PRIVATE = ["http://10.0.0.7/h", "http://192.168.1.5/h", "http://172.16.0.1/h", "http://[fd00::1]/h",
           "http://100.64.0.1/h"]
LOOPBACK = ["http://127.0.0.1:9/h", "http://[::1]:9/h", "http://127.1.2.3/h", "http://[::ffff:127.0.0.1]/h"]
METADATA = ["http://169.254.169.254/latest/meta-data", "http://[fd00:ec2::254]/", "http://100.100.100.200/",
            "http://168.63.129.16/", "http://169.254.170.2/v2/credentials", "http://[::ffff:169.254.169.254]/",
            "http://[64:ff9b::a9fe:a9fe]/", "http://169.254.169.1/", "http://0.0.0.0/"]



def _api(db: Database, **settings: Any) -> Any:
    s = Settings(db_url=db.url, allow_insecure_http=True, rate_limit_per_second=1e6, rate_limit_burst=10**6,
                 **settings)
    app = create_app(db, s, server_signer=Signer.generate(), registry=CollectorRegistry())
    return client(app, key_for(db, TENANT_A))


def _save(api: Any, n: int, url: str, opt_in: bool) -> Any:
    return api.post("/v1/destinations", json={"destinationId": f"d{n}", "url": url, "secret": generate_secret(),
                                              "allowPrivateNetwork": opt_in})


def _refused(r: Any) -> bool:
    return r.status_code == 400 and r.json()["code"] == "DESTINATION_URL_FORBIDDEN"


def test_production_defaults_refuse_private_loopback_and_metadata_even_with_the_flag(db: Database) -> None:
    api = _api(db)
    for n, url in enumerate(PRIVATE + LOOPBACK + METADATA):
        for opt_in in (False, True):
            r = _save(api, n, url, opt_in)
            assert _refused(r), (url, opt_in, r.text)
    with db.read() as tx:
        assert store.list_destinations(tx, TENANT_A) == []


def test_allow_private_webhooks_needs_the_destination_opt_in(db: Database) -> None:
    api = _api(db, allow_private_webhooks=True)
    for n, url in enumerate(PRIVATE):
        assert _refused(_save(api, n, url, False)), url  # the flag narrows: without it, no private range
        r = _save(api, n, url, True)
        assert r.status_code == 201, (url, r.text)
    for n, url in enumerate(LOOPBACK + METADATA, start=100):
        assert _refused(_save(api, n, url, True)), url  # loopback is not "private"; metadata never


def test_allowed_networks_lift_only_the_listed_ranges(db: Database) -> None:
    api = _api(db, allowed_webhook_networks=("10.20.0.0/16", "fd12:3456::/32"))
    assert _save(api, 1, "http://10.20.1.1/h", True).status_code == 201
    assert _save(api, 2, "http://[fd12:3456::9]/h", True).status_code == 201
    assert _refused(_save(api, 3, "http://10.20.1.1/h", False))  # no opt-in: nothing lifted
    assert _refused(_save(api, 4, "http://10.21.0.1/h", True))
    assert _refused(_save(api, 5, "http://192.168.0.1/h", True))
    # even a deployment listing everything cannot reach metadata
    everything = _api(db, allowed_webhook_networks=("0.0.0.0/0", "::/0"), allow_private_webhooks=True)
    for n, url in enumerate(METADATA, start=10):
        assert _refused(_save(everything, n, url, True)), url


def test_a_tenant_flag_cannot_widen_an_update_or_an_enable(db: Database) -> None:
    api = _api(db, allow_loopback_webhooks=True)  # a development deployment: loopback only
    assert _save(api, 1, "http://127.0.0.1:9/h", False).status_code == 201
    r = api.patch("/v1/destinations/d1", json={"url": "http://10.0.0.7/h", "allowPrivateNetwork": True})
    assert _refused(r)
    assert api.get("/v1/destinations/d1").json()["url"] == "http://127.0.0.1:9/h"


def test_settings_are_read_from_the_environment_and_reach_api_and_worker(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS", "true")
    monkeypatch.setenv("SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS", "10.20.0.0/16, fd12::/16")
    settings = Settings(db_url=db.url)
    assert settings.allow_private_webhooks is True
    assert settings.allowed_webhook_networks == ("10.20.0.0/16", "fd12::/16")
    app = create_app(db, settings, server_signer=Signer.generate(), registry=CollectorRegistry())
    policy = app.state.settlekit.destination_policy
    assert policy.allow_private_network is True and policy.allowed_networks == ("10.20.0.0/16", "fd12::/16")
    workers = Workers(db, settings, registry=CollectorRegistry())  # not started
    cfg = workers.delivery.config
    assert cfg.allow_private_network is True and cfg.allowed_networks == ("10.20.0.0/16", "fd12::/16")
    # the worker applies the same narrowing per destination
    opted = store.Destination(TENANT_A, "d", "https://10.0.0.7/", "secret:x", allow_private_network=True)
    assert workers.delivery._policy(opted).allow_private_network is True
    not_opted = store.Destination(TENANT_A, "d", "https://10.0.0.7/", "secret:x")
    pol = workers.delivery._policy(not_opted)
    assert pol.allow_private_network is False and pol.allowed_networks == ()
    monkeypatch.setenv("SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS", "10.0.0.0/33")
    with pytest.raises(ConfigurationError):
        Settings(db_url=db.url)
    monkeypatch.delenv("SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS")
    monkeypatch.delenv("SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS")
    default = Settings(db_url=db.url)
    assert default.allow_private_webhooks is False and default.allowed_webhook_networks == ()


@pytest.mark.parametrize("url", ["https://xn--a/", "https://xn--127-0.0.1/", "https://xn--/x", "https://a..b/",
                                 "https://.../", "https://" + "a" * 64 + ".example/", "https://xn--zz-.example/"])
def test_a_host_no_resolver_can_encode_is_refused_as_a_url(db: Database, url: str) -> None:
    """A host that is not a valid IDNA name (a bad `xn--` label, an empty or over-long label) is refused like
    any URL the guard cannot vet: 400 DESTINATION_URL_FORBIDDEN on create and update, nothing saved."""
    api = _api(db)
    assert _refused(_save(api, 0, url, False))
    assert _save(api, 1, "http://93.184.215.14/h", False).status_code == 201
    r = api.patch("/v1/destinations/d1", json={"url": url})
    assert _refused(r), r.text
    assert api.get("/v1/destinations/d1").json()["url"] == "http://93.184.215.14/h"


def test_a_refused_destination_does_not_reveal_what_an_internal_host_name_resolves_to(db: Database) -> None:
    """The production policy with a stand-in resolver (nothing is sent): the refusal of a host name is one answer
    whether the name resolves to a private or unique-local address or does not resolve at all (before: the address,
    then its kind, against "cannot resolve host": a tenant's view into the deployment's internal DNS)."""
    internal = {"db.corp.internal": "10.20.30.40", "vault.corp.internal": "fd12:3456::7", "nothing.corp.internal": None}

    def resolver(host: str, port: int) -> list[str]:
        address = internal[host]
        return [address] if address else []

    app = make_app(db, destination_policy=DestinationPolicy(resolver=resolver))
    api = client(app, key_for(db, TENANT_A))
    answers = set()
    for host, address in internal.items():
        r = api.post("/v1/destinations", json={"destinationId": "d1", "url": f"https://{host}/hook",
                                               "secret": generate_secret()})
        assert r.status_code == 400 and r.json()["code"] == "DESTINATION_URL_FORBIDDEN", r.text
        assert address is None or address not in r.text
        problem = r.json()
        answers.add((problem["detail"].replace(host, "H"), tuple(sorted(problem["details"]))))
    assert len(answers) == 1, answers
