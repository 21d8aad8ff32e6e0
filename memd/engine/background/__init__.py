"""Memory's background life: the durable job queue, the scheduler, maintenance sweeps,
consolidation and history compaction."""
