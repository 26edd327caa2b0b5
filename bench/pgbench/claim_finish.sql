-- One claim + finish per run of this script, statement for statement the raw-SQL cell of
-- bench/work_loop.py (run_raw), sent by pgbench's C client instead of Python: the
-- project's claim lock (the advisory key the server takes), the top ready row of the
-- dispatch index with the open-blocker check, a claim row, the issue marked held; then a
-- second transaction that finishes both.
--
-- Variables (pgbench -D): project (issues_issue.project_id), lock (the advisory key of
-- the project, as bench.work_loop.project_lock computes it), org (uuid), agent_key
-- (orgs_agentkey.id), principal (the key's user id). Run with -M prepared.
BEGIN;
SELECT pg_advisory_xact_lock(7302, :lock);
SELECT i.id AS issue_id FROM issues_issue i
 WHERE i.project_id = :project AND i.work AND NOT i.awaiting_triage AND i.status IN ('todo', 'doing', 'review')
   AND (i.lease_expires_at IS NULL OR i.lease_expires_at <= now())
   AND NOT EXISTS (SELECT 1 FROM issues_relation r JOIN issues_issue s ON s.id = r.source_id
                    WHERE r.target_id = i.id AND r.type = 'blocks' AND s.status NOT IN ('done', 'canceled'))
 ORDER BY i.dispatch_rank, i.created_at, i.number LIMIT 1 \gset
INSERT INTO leases_claim (org_id, issue_id, key_id, principal_id, kind, token_hash, created_at, expires_at,
                          last_heartbeat_at, end_reason)
VALUES (:org, :issue_id, :agent_key, :principal, 'work', encode(sha256(gen_random_uuid()::text::bytea), 'hex'), now(),
        now() + interval '30 minutes', now(), '')
RETURNING id AS claim_id \gset
UPDATE issues_issue SET status = 'doing', lease_claim_id = :claim_id, lease_principal_id = :principal,
       lease_expires_at = now() + interval '30 minutes', updated_at = now()
 WHERE id = :issue_id AND (lease_claim_id IS NULL OR lease_expires_at <= now());
COMMIT;
BEGIN;
UPDATE leases_claim SET ended_at = now(), end_reason = 'finished' WHERE id = :claim_id;
UPDATE issues_issue SET status = 'done', closed_at = now(), lease_claim_id = NULL, lease_principal_id = NULL,
       lease_expires_at = NULL
 WHERE id = :issue_id;
COMMIT;
