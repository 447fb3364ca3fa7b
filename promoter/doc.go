// Package promoter is thaw's reconcile core: a de-duplicating queue of
// promotion keys (lake table, partition), a planner that applies policies and
// prechecks, an executor that runs one bulk-load transaction per target, and a
// durable ledger keyed by (lake table, partition, lake snapshot id).
//
// Contract: the same lake snapshot of the same partition is never promoted
// twice; a restarted promoter resumes or aborts what its ledger holds; no
// credential ever enters a ledger record, log line, metric or event.
//
// Status: implemented with issue 8.
package promoter
