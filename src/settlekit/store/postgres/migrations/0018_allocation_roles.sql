-- A split plan may give one party two roles (two rules naming it, or the rest of the cents going to a role's
-- default party that a rule also names): its allocations of one posting then differ by role only, so the role is
-- part of an allocation's key. Before, the second one broke the key and the append was refused.
ALTER TABLE ledger_allocations DROP CONSTRAINT ledger_allocations_pkey;
ALTER TABLE ledger_allocations ADD PRIMARY KEY (tenant_id, entry_id, posting_id, party_id, party_role);
ALTER TABLE ledger_rebuild_allocations DROP CONSTRAINT ledger_rebuild_allocations_pkey;
ALTER TABLE ledger_rebuild_allocations ADD PRIMARY KEY (run_id, tenant_id, entry_id, posting_id, party_id,
                                                        party_role);
