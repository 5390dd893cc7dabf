"""What a tenant's cursors and ids say, on both backends: nothing of other tenants' activity. Event positions
(the feed, SSE ids, append answers, postings) and delivery ids are opaque tokens bound to the tenant; another
tenant's token, an altered one and an old numeric one are refused with their codes; tokens outlive a restart."""

from __future__ import annotations

from typing import Any

from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, client, delivery_row_id, key_for, make_app, position_of, seed_tenant

ACTOR = {"type": "system", "id": "privacy-test"}


def create_job(api: Any, job_id: str) -> dict[str, Any]:
    r = api.post("/v1/jobs", json={"jobId": job_id, "payload": {"templateId": "t1", "constraints": {}}})
    assert r.status_code == 201, r.text
    return dict(r.json())


def feed(api: Any, after: str | None = None, **params: Any) -> dict[str, Any]:
    r = api.get("/v1/events", params={**params, **({"after": after} if after is not None else {})})
    assert r.status_code == 200, r.text
    return dict(r.json())


def refused(r: Any, code: str) -> None:
    assert r.status_code == 400 and r.json()["code"] == code, r.text


def test_feed_cursors_do_not_move_with_other_tenants_writes(db: Database) -> None:
    app = make_app(db)
    api_a, api_b = client(app, key_for(db, TENANT_A)), client(app, key_for(db, TENANT_B))
    appended = create_job(api_a, "job_a1")["positions"]
    first = feed(api_a)
    assert [e["position"] for e in first["events"]] == appended and first["next"] == appended[-1]
    for i in range(5):  # the other tenant writes: A's view of the feed does not change at all
        create_job(api_b, f"job_b{i}")
    again = feed(api_a, first["next"])
    assert again == {"events": [], "next": first["next"]}
    assert feed(api_a, first["next"], types="NO_SUCH_TYPE")["next"] == first["next"]
    assert feed(api_a) == first, "the same page, the same cursors"
    later = create_job(api_a, "job_a2")["positions"]
    page = feed(api_a, first["next"])
    assert [e["position"] for e in page["events"]] == later and page["next"] == later[-1]
    # the cursors are tokens of one length that carry no number
    tokens = appended + later + [e["position"] for e in feed(api_b, limit=500)["events"]]
    assert {len(t) for t in tokens} == {32} and not any(t.isdigit() for t in tokens)
    assert position_of(db, TENANT_A, later[-1]) > position_of(db, TENANT_A, appended[-1]) + 5


def test_a_cursor_of_another_tenant_an_altered_one_or_a_number_is_refused(db: Database) -> None:
    app = make_app(db)
    api_a, api_b = client(app, key_for(db, TENANT_A)), client(app, key_for(db, TENANT_B))
    token = create_job(api_a, "job_a1")["positions"][0]
    create_job(api_b, "job_b1")
    refused(api_b.get("/v1/events", params={"after": token}), "CURSOR_INVALID")
    refused(api_b.get("/v1/events/stream", headers={"Last-Event-ID": token}), "CURSOR_INVALID")
    refused(api_b.get("/v1/ledger/balances", params={"position": token}), "CURSOR_INVALID")
    altered = token[:5] + ("A" if token[5] != "A" else "B") + token[6:]
    refused(api_a.get("/v1/events", params={"after": altered}), "CURSOR_INVALID")
    refused(api_a.get("/v1/events/stream", params={"after": altered}), "CURSOR_INVALID")
    for number in ("1", "2", "123456789"):
        refused(api_a.get("/v1/events", params={"after": number}), "CURSOR_NUMERIC")
        refused(api_a.get("/v1/events/stream", headers={"Last-Event-ID": number}), "CURSOR_NUMERIC")
        refused(api_a.get("/v1/ledger/balances", params={"position": number}), "CURSOR_NUMERIC")
    assert feed(api_a, "0")["events"] == feed(api_a)["events"] != [], "0 (the start) still reads from the start"


def test_cursors_outlive_a_restart(db: Database) -> None:
    api = client(make_app(db), key_for(db, TENANT_A))
    create_job(api, "job_a1")
    cursor = feed(api)["next"]
    later = create_job(api, "job_a2")["positions"]
    restarted = client(make_app(db), key_for(db, TENANT_A))  # a new process: the key is the deployment's
    assert [e["position"] for e in feed(restarted, cursor)["events"]] == later


def test_delivery_ids_are_the_tenants_tokens(db: Database) -> None:
    app = make_app(db)
    api_a, api_b = client(app, key_for(db, TENANT_A)), client(app, key_for(db, TENANT_B))
    seeded = seed_tenant(db, api_a)
    everything = api_a.get("/v1/deliveries", params={"limit": 1000}).json()["deliveries"]
    assert len(everything) > 1 and all(len(d["id"]) == 32 and not d["id"].isdigit() for d in everything)
    assert delivery_row_id(db, TENANT_A, seeded.delivery_id) == seeded.delivery_row
    paged, after = [], None
    while True:  # keyset pages by nextAfterId
        body = api_a.get("/v1/deliveries", params={"limit": 1, **({"afterId": after} if after else {})}).json()
        paged += [d["id"] for d in body["deliveries"]]
        after = body["nextAfterId"]
        if after is None:
            break
    assert paged == [d["id"] for d in everything]
    one = api_a.get(f"/v1/deliveries/{seeded.delivery_id}").json()
    assert one["id"] == seeded.delivery_id and "attemptLog" in one
    # another tenant: the id names nothing of its own, and says nothing of whether it exists
    path = f"/v1/deliveries/{seeded.delivery_id}"
    for r in (api_b.get(path), api_b.post(f"{path}/requeue")):
        assert r.status_code == 404 and r.json()["details"] == {"delivery_id": seeded.delivery_id}, r.text
    refused(api_b.get("/v1/deliveries", params={"afterId": seeded.delivery_id}), "CURSOR_INVALID")
    refused(api_a.get("/v1/deliveries", params={"afterId": str(seeded.delivery_row)}), "CURSOR_NUMERIC")
    refused(api_a.get(f"/v1/deliveries/{seeded.delivery_row}"), "CURSOR_NUMERIC")
    # a refusal about a delivery names it by the tenant's id
    conflict = api_a.post(f"/v1/deliveries/{seeded.delivery_id}/requeue")
    assert conflict.status_code == 409 and conflict.json()["details"]["delivery_id"] == seeded.delivery_id


def test_postings_show_position_cursors_and_sealed_page_cursors(db: Database) -> None:
    app = make_app(db)
    api_a, api_b = client(app, key_for(db, TENANT_A)), client(app, key_for(db, TENANT_B))
    seed_tenant(db, api_a)
    accounts = api_a.get("/v1/ledger/balances").json()["balances"]
    pages = {a: api_a.get(f"/v1/ledger/accounts/{a}/postings", params={"limit": 1}).json() for a in accounts}
    account, page = next((a, p) for a, p in pages.items() if p["nextCursor"])
    position = page["postings"][0]["position"]
    assert len(position) == 32 and not position.isdigit()
    balances = api_a.get("/v1/ledger/balances", params={"position": position}).json()
    assert balances["position"] == position and balances["balances"]
    # the chart's accounts are every tenant's: only the cursor can be refused
    refused(api_b.get(f"/v1/ledger/accounts/{account}/postings", params={"cursor": page["nextCursor"]}),
            "CURSOR_INVALID")
    assert api_a.get(f"/v1/ledger/accounts/{account}/postings",
                     params={"cursor": page["nextCursor"]}).status_code == 200


def test_a_delivery_shows_that_a_worker_holds_it_not_which_one(db: Database) -> None:
    """A worker's id names its host and process: a tenant sees `leased`, never the worker."""
    app = make_app(db)
    api_a = client(app, key_for(db, TENANT_A))
    seeded = seed_tenant(db, api_a)
    assert api_a.get(f"/v1/deliveries/{seeded.delivery_id}").json()["leased"] is False
    with db.transaction() as tx:
        tx.execute("UPDATE deliveries SET lease_owner = ?, lease_expires_at = ? WHERE id = ?",
                   ("worker-host.internal:4242", "2999-01-01T00:00:00.000Z", seeded.delivery_row))
    one = api_a.get(f"/v1/deliveries/{seeded.delivery_id}")
    listed = api_a.get("/v1/deliveries", params={"limit": 1000})
    assert one.json()["leased"] is True and "lease_owner" not in one.json()
    assert all("worker-host" not in r.text for r in (one, listed))
