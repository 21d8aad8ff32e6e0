-- The read policies that let a workspace's members see each other's memories test the
-- acting user's own rows first. PostgreSQL evaluates an OR left to right and stops at the
-- first true arm, but it may put memd_workspace_read's function before memd_own_rows'
-- plain comparison: then every row a user reads of their own memory_stats calls
-- memd_shared_memory (a lookup of the memory), and every own memory in a named workspace
-- calls memd_shares_workspace, on the ~100 stats rows a compile reads. With the own-row test
-- inside each policy the functions run only for other users' rows, whichever order the
-- policies are combined in. What each policy admits is unchanged: own rows were already
-- admitted by memd_own_rows.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_policies WHERE tablename = 'memory_stats'
               AND policyname = 'memd_workspace_read') THEN
        ALTER POLICY memd_workspace_read ON memory_stats
            USING (user_id = current_setting('memd.user_id', true)
                   OR memd_shared_memory(user_id, memory_id));
    END IF;
    IF EXISTS (SELECT 1 FROM pg_policies WHERE tablename = 'memories'
               AND policyname = 'memd_workspace_read') THEN
        ALTER POLICY memd_workspace_read ON memories
            USING (user_id = current_setting('memd.user_id', true)
                   OR (workspace <> '' AND memd_shares_workspace(workspace, user_id)));
    END IF;
    IF EXISTS (SELECT 1 FROM pg_policies WHERE tablename = 'memory_entities'
               AND policyname = 'memd_workspace_read') THEN
        ALTER POLICY memd_workspace_read ON memory_entities
            USING (user_id = current_setting('memd.user_id', true)
                   OR EXISTS (SELECT 1 FROM memories m
                              WHERE m.user_id = memory_entities.user_id
                                AND m.memory_id = memory_entities.memory_id
                                AND m.workspace <> ''
                                AND memd_shares_workspace(m.workspace, m.user_id)));
    END IF;
END $$;
