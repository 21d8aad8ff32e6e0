-- Context virtualization's detailed fidelity (L1, about 30 % of the full text) and who
-- made the lower fidelities' texts: "extractive" (memd's own excerpts, made without a
-- model) or the helper model's name. losses is JSON text: for each of "detailed" and
-- "compact", what that text dropped and what it can still answer.
ALTER TABLE context_objects ADD COLUMN detailed text NOT NULL DEFAULT '';
ALTER TABLE context_objects ADD COLUMN tokens_l1 integer NOT NULL DEFAULT 0;
ALTER TABLE context_objects ADD COLUMN summarized_by text NOT NULL DEFAULT 'extractive';
ALTER TABLE context_objects ADD COLUMN losses text NOT NULL DEFAULT '{}';
