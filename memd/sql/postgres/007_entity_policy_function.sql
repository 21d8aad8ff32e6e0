-- The workspace-read policy of memory_entities tests a shared memory through
-- memd_shared_memory (004), as memory_stats' does, instead of an EXISTS over memories.
-- The EXISTS is correlated with each entity row, so PostgreSQL could not prune it: every
-- statement that read memory_entities under row-level security planned a subquery over
-- every partition of memories (2 x 256 leaves of 11 indexes each at the production
-- layout), which made a query naming an entity far slower in team mode than one naming
-- none. The function is opaque to the planner and runs only
-- for other users' rows (the own-row test comes first, as in 006). What the policy
-- admits is unchanged: the function's body is the EXISTS it replaces.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_policies WHERE tablename = 'memory_entities'
               AND policyname = 'memd_workspace_read') THEN
        ALTER POLICY memd_workspace_read ON memory_entities
            USING (user_id = current_setting('memd.user_id', true)
                   OR memd_shared_memory(user_id, memory_id));
    END IF;
END $$;
