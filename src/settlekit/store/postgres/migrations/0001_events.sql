-- Event store: streams (head + snapshot), events (global position, xid), signer keys, idempotency records.
CREATE SEQUENCE IF NOT EXISTS events_position_seq CACHE 1;

CREATE TABLE streams (
    tenant_id        TEXT NOT NULL,
    stream_id        TEXT NOT NULL,
    stream_type      TEXT NOT NULL,
    head_seq         BIGINT NOT NULL,
    head_chain_hash  TEXT NOT NULL,
    head_event_id    TEXT NOT NULL,
    snapshot_json    TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, stream_id)
);

CREATE TABLE events (
    position         BIGINT PRIMARY KEY DEFAULT nextval('events_position_seq'),
    tenant_id        TEXT NOT NULL,
    stream_type      TEXT NOT NULL,
    stream_id        TEXT NOT NULL,
    seq              BIGINT NOT NULL,
    event_id         TEXT NOT NULL,
    type             TEXT NOT NULL,
    at               TEXT NOT NULL,
    payload_hash     TEXT NOT NULL,
    prev_chain_hash  TEXT,
    chain_hash       TEXT NOT NULL,
    signature        TEXT,
    signer_key_id    TEXT,
    event_json       TEXT NOT NULL,
    correlation_id   TEXT,
    causation_id     TEXT,
    txid             XID8 NOT NULL,
    batch_id         UUID NOT NULL,
    recorded_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
ALTER SEQUENCE events_position_seq OWNED BY events.position;
CREATE UNIQUE INDEX events_stream_seq ON events (tenant_id, stream_id, seq);
CREATE UNIQUE INDEX events_tenant_event_id ON events (tenant_id, event_id);
CREATE UNIQUE INDEX events_stream_chain_hash ON events (tenant_id, stream_id, chain_hash);

CREATE TABLE signer_keys (
    tenant_id       TEXT NOT NULL,
    key_id          TEXT NOT NULL,
    public_key_pem  TEXT NOT NULL,
    purpose         TEXT NOT NULL CHECK (purpose IN ('robot', 'operator', 'server')),
    status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'rotated', 'revoked')),
    entity_id       TEXT,
    valid_from      TIMESTAMPTZ NOT NULL DEFAULT now(),
    valid_to        TIMESTAMPTZ,
    rotated_at      TIMESTAMPTZ,
    revoked_at      TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key_id)
);

CREATE TABLE idempotency_keys (
    tenant_id      TEXT NOT NULL,
    principal_id   TEXT NOT NULL,
    endpoint       TEXT NOT NULL,
    idem_key       TEXT NOT NULL,
    request_hash   TEXT NOT NULL,
    status_code    INT NOT NULL,
    response_json  TEXT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at     TIMESTAMPTZ,
    PRIMARY KEY (tenant_id, principal_id, endpoint, idem_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at) WHERE expires_at IS NOT NULL;

-- Compare-and-swap the stream head and insert the events, in one round trip.
-- The caller has already run pg_current_xact_id() in this transaction, so the xid exists before positions are
-- drawn. Sends the one NOTIFY of the transaction when p_notify. Returns ('ok', first_seq, positions) or ('conflict', current_seq, current_chain_hash).
CREATE FUNCTION settlekit_append(
    p_tenant TEXT, p_stream TEXT, p_stream_type TEXT,
    p_expected_hash TEXT, p_expect_empty BOOLEAN, p_expected_seq BIGINT,
    p_snapshot TEXT, p_batch UUID,
    p_ids TEXT[], p_types TEXT[], p_ats TEXT[], p_payload_hashes TEXT[], p_prev_hashes TEXT[],
    p_chain_hashes TEXT[], p_signatures TEXT[], p_key_ids TEXT[], p_jsons TEXT[],
    p_correlation TEXT, p_causation TEXT, p_notify BOOLEAN
) RETURNS TABLE (outcome TEXT, base_seq BIGINT, head_hash TEXT, positions BIGINT[])
LANGUAGE plpgsql AS $$
DECLARE
    n INT := array_length(p_ids, 1);
    v_last_hash TEXT := p_chain_hashes[n];
    v_last_id TEXT := p_ids[n];
    v_base BIGINT;
    v_hash TEXT;
    v_xid XID8 := pg_current_xact_id();
    v_positions BIGINT[] := '{}';
BEGIN
    IF p_expect_empty THEN
        INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash, head_event_id,
                             snapshot_json)
        VALUES (p_tenant, p_stream, p_stream_type, n, v_last_hash, v_last_id, p_snapshot)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT s.head_seq, s.head_chain_hash INTO v_base, v_hash FROM streams s
             WHERE s.tenant_id = p_tenant AND s.stream_id = p_stream;
            RETURN QUERY SELECT 'conflict'::TEXT, v_base, v_hash, NULL::BIGINT[];
            RETURN;
        END IF;
        v_base := 0;
    ELSE
        UPDATE streams s SET head_seq = s.head_seq + n, head_chain_hash = v_last_hash,
                             head_event_id = v_last_id, snapshot_json = COALESCE(p_snapshot, s.snapshot_json),
                             updated_at = now()
         WHERE s.tenant_id = p_tenant AND s.stream_id = p_stream
           AND (p_expected_hash IS NULL OR s.head_chain_hash = p_expected_hash)
           AND (p_expected_seq IS NULL OR s.head_seq = p_expected_seq)
        RETURNING s.head_seq - n INTO v_base;
        IF NOT FOUND THEN
            SELECT s.head_seq, s.head_chain_hash INTO v_base, v_hash FROM streams s
             WHERE s.tenant_id = p_tenant AND s.stream_id = p_stream;
            RETURN QUERY SELECT 'conflict'::TEXT, v_base, v_hash, NULL::BIGINT[];
            RETURN;
        END IF;
    END IF;
    WITH inserted AS (
        INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash,
                            prev_chain_hash, chain_hash, signature, signer_key_id, event_json,
                            correlation_id, causation_id, txid, batch_id)
        SELECT p_tenant, p_stream_type, p_stream, v_base + u.ord, u.id, u.type, u.at, u.ph, u.prev, u.ch, u.sig,
               u.kid, u.js, p_correlation, p_causation, v_xid, p_batch
          FROM unnest(p_ids, p_types, p_ats, p_payload_hashes, p_prev_hashes, p_chain_hashes, p_signatures,
                      p_key_ids, p_jsons) WITH ORDINALITY AS u(id, type, at, ph, prev, ch, sig, kid, js, ord)
         ORDER BY u.ord
        RETURNING seq, position
    )
    SELECT array_agg(position ORDER BY seq) INTO v_positions FROM inserted;
    IF p_notify THEN
        PERFORM pg_notify('settlekit_events', '');
    END IF;
    RETURN QUERY SELECT 'ok'::TEXT, v_base, v_last_hash, v_positions;
END;
$$;

-- The one-event form: scalars instead of arrays and plain statements (the common case: one event per call).
CREATE FUNCTION settlekit_append1(
    p_tenant TEXT, p_stream TEXT, p_stream_type TEXT,
    p_expected_hash TEXT, p_expect_empty BOOLEAN, p_expected_seq BIGINT,
    p_snapshot TEXT, p_batch UUID,
    p_id TEXT, p_type TEXT, p_at TEXT, p_payload_hash TEXT, p_prev_hash TEXT,
    p_chain_hash TEXT, p_signature TEXT, p_key_id TEXT, p_json TEXT,
    p_correlation TEXT, p_causation TEXT, p_notify BOOLEAN
) RETURNS TABLE (outcome TEXT, base_seq BIGINT, head_hash TEXT, positions BIGINT[])
LANGUAGE plpgsql AS $$
DECLARE
    v_base BIGINT;
    v_hash TEXT;
    v_xid XID8 := pg_current_xact_id();
    v_pos BIGINT;
BEGIN
    IF p_expect_empty THEN
        INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash, head_event_id,
                             snapshot_json)
        VALUES (p_tenant, p_stream, p_stream_type, 1, p_chain_hash, p_id, p_snapshot)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT s.head_seq, s.head_chain_hash INTO v_base, v_hash FROM streams s
             WHERE s.tenant_id = p_tenant AND s.stream_id = p_stream;
            RETURN QUERY SELECT 'conflict'::TEXT, v_base, v_hash, NULL::BIGINT[];
            RETURN;
        END IF;
        v_base := 0;
    ELSE
        UPDATE streams s SET head_seq = s.head_seq + 1, head_chain_hash = p_chain_hash, head_event_id = p_id,
                             snapshot_json = COALESCE(p_snapshot, s.snapshot_json), updated_at = now()
         WHERE s.tenant_id = p_tenant AND s.stream_id = p_stream
           AND (p_expected_hash IS NULL OR s.head_chain_hash = p_expected_hash)
           AND (p_expected_seq IS NULL OR s.head_seq = p_expected_seq)
        RETURNING s.head_seq - 1 INTO v_base;
        IF NOT FOUND THEN
            SELECT s.head_seq, s.head_chain_hash INTO v_base, v_hash FROM streams s
             WHERE s.tenant_id = p_tenant AND s.stream_id = p_stream;
            RETURN QUERY SELECT 'conflict'::TEXT, v_base, v_hash, NULL::BIGINT[];
            RETURN;
        END IF;
    END IF;
    INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash, prev_chain_hash,
                        chain_hash, signature, signer_key_id, event_json, correlation_id, causation_id, txid, batch_id)
    VALUES (p_tenant, p_stream_type, p_stream, v_base + 1, p_id, p_type, p_at, p_payload_hash, p_prev_hash,
            p_chain_hash, p_signature, p_key_id, p_json, p_correlation, p_causation, v_xid, p_batch)
    RETURNING position INTO v_pos;
    IF p_notify THEN
        PERFORM pg_notify('settlekit_events', '');
    END IF;
    RETURN QUERY SELECT 'ok'::TEXT, v_base, p_chain_hash, ARRAY[v_pos];
END;
$$;
