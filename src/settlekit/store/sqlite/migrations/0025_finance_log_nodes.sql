-- The tenant's Merkle log keeps its perfect subtrees: node (level, node_index) is the hash of leaves
-- [node_index * 2^level, (node_index + 1) * 2^level), written by the close that completes it and never changed, so
-- an inclusion or consistency proof reads O(log n) rows instead of every leaf. Level 0 stays in
-- finance_log_leaves. The migration's data step builds the nodes of the logs already closed.
CREATE TABLE finance_log_nodes (
    tenant_id   TEXT NOT NULL,
    level       INTEGER NOT NULL,
    node_index  BIGINT NOT NULL,
    node_hash   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, level, node_index)
);
