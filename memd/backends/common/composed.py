"""A store composed of small parts, one per role of the Store protocol: the engine calls
``store.method(...)``, and each method is the bound method of the part that owns it, bound
once when the store is built (no hop per call).

Each backend builds its connection and its parts, and hands them to
:class:`ComposedStore`; each parameter is typed by its role protocol, so the type checker
holds every part to its role where the backend builds its store (a drifted signature in
a part fails ``mypy`` there, and the error names the member), and this class to
:class:`~memd.backends.base.Store`.
"""

from __future__ import annotations

from memd.backends import base
from memd.backends.accounts import Accounts
from memd.backends.common.admissions import Admissions
from memd.backends.common.calls import Calls
from memd.backends.common.connection import SqlConnection
from memd.backends.common.context_objects import ContextObjects
from memd.backends.common.facts import Facts
from memd.backends.common.faults import Faults
from memd.backends.common.pauses import Pauses
from memd.backends.common.recall import Forgotten, Paragraphs, Responses
from memd.backends.common.sessions import Sessions


class ComposedStore:
    """The Store protocol as the methods of its parts. The parts whose SQL both backends
    share are built here on ``conn``; a backend hands over its own parts (``sessions``
    only when its sessions differ)."""

    def __init__(
        self, conn: SqlConnection, *, messages: base.MessageStore,
        memories: base.MemoryStore, jobs: base.JobQueue, erasure: base.ErasureStore,
        embeddings: base.EmbeddingCache, vectors: base.VectorCache,
        sessions: base.SessionStore | None = None,
    ) -> None:
        lifecycle: base.Lifecycle = conn
        sessions = Sessions(conn) if sessions is None else sessions
        facts, forgotten, paragraphs = Facts(conn), Forgotten(conn), Paragraphs(conn)
        responses, context_objects = Responses(conn), ContextObjects(conn)
        calls, accounts = Calls(conn), Accounts(conn)
        self.dim = lifecycle.dim
        self.concurrent_reads = lifecycle.concurrent_reads
        self.concurrent_writes = lifecycle.concurrent_writes
        # Lifecycle
        self.close = lifecycle.close
        self.transaction = lifecycle.transaction
        self.in_transaction = lifecycle.in_transaction
        self.side_reads = lifecycle.side_reads
        self.read_batch = lifecycle.read_batch
        self.schema_version = lifecycle.schema_version
        self.unfinished_copy = lifecycle.unfinished_copy
        self.check_row_security = lifecycle.check_row_security
        self.ensure_history_partitions = lifecycle.ensure_history_partitions
        # SessionStore
        self.create_session = sessions.create_session
        self.get_session = sessions.get_session
        self.get_sessions = sessions.get_sessions
        self.list_sessions = sessions.list_sessions
        self.update_session = sessions.update_session
        self.set_session_title = sessions.set_session_title
        self.add_session_usage = sessions.add_session_usage
        self.register_system_prompt = sessions.register_system_prompt
        self.get_system_prompt = sessions.get_system_prompt
        self.expire_sessions = sessions.expire_sessions
        self.session_users = sessions.session_users
        # MessageStore
        self.append_messages = messages.append_messages
        self.find_chain = messages.find_chain
        self.last_chain_hash = messages.last_chain_hash
        self.get_messages = messages.get_messages
        self.messages_at = messages.messages_at
        self.recent_messages = messages.recent_messages
        self.get_message = messages.get_message
        self.mark_compressed = messages.mark_compressed
        self.set_message_embeddings = messages.set_message_embeddings
        self.messages_missing_embedding = messages.messages_missing_embedding
        self.nearest_messages = messages.nearest_messages
        self.keyword_messages = messages.keyword_messages
        self.get_message_vectors = messages.get_message_vectors
        self.delete_inactive_messages = messages.delete_inactive_messages
        # MemoryStore
        self.insert_memory = memories.insert_memory
        self.get_memory = memories.get_memory
        self.find_memory_id = memories.find_memory_id
        self.find_by_hash = memories.find_by_hash
        self.update_memory = memories.update_memory
        self.delete_memory = memories.delete_memory
        self.list_memories = memories.list_memories
        self.count_memories = memories.count_memories
        self.nearest_memories = memories.nearest_memories
        self.keyword_memories = memories.keyword_memories
        self.memories_by_entities = memories.memories_by_entities
        self.get_memory_vectors = memories.get_memory_vectors
        self.memory_candidates = memories.memory_candidates
        self.record_access = memories.record_access
        self.max_access_count = memories.max_access_count
        self.memory_users = memories.memory_users
        self.link_entities = memories.link_entities
        self.iter_memories = memories.iter_memories
        self.expire_memories = memories.expire_memories
        self.delete_session_working_memory = memories.delete_session_working_memory
        # FactStore
        self.get_facts = facts.get_facts
        self.insert_fact = facts.insert_fact
        self.supersede_fact = facts.supersede_fact
        self.delete_facts = facts.delete_facts
        # ForgottenStore
        self.add_forgotten = forgotten.add_forgotten
        self.forgotten = forgotten.forgotten
        # ParagraphStore
        self.see_paragraphs = paragraphs.see_paragraphs
        self.recurring_paragraphs = paragraphs.recurring_paragraphs
        # ResponseStore
        self.link_response = responses.link_response
        self.response_session = responses.response_session
        # ContextObjectStore
        self.add_context_objects = context_objects.add_context_objects
        self.context_objects = context_objects.context_objects
        self.set_object_summaries = context_objects.set_object_summaries
        self.apply_transitions = context_objects.apply_transitions
        self.fidelity_transitions = context_objects.fidelity_transitions
        faults = Faults(conn)
        self.add_fault = faults.add_fault
        admissions = Admissions(conn)
        self.add_admissions = admissions.add_admissions
        self.admissions = admissions.admissions
        self.faults = faults.faults
        # CallStore
        self.record_call = calls.record_call
        self.finish_call = calls.finish_call
        self.get_call = calls.get_call
        self.list_calls = calls.list_calls
        self.record_usage = calls.record_usage
        self.list_usage = calls.list_usage
        self.usage_totals = calls.usage_totals
        pauses = Pauses(conn)
        self.set_paused = pauses.set_paused
        self.pauses = pauses.pauses
        # AccountStore
        self.create_user = accounts.create_user
        self.get_user = accounts.get_user
        self.list_users = accounts.list_users
        self.add_api_key = accounts.add_api_key
        self.api_key_user = accounts.api_key_user
        self.list_api_keys = accounts.list_api_keys
        self.revoke_api_key = accounts.revoke_api_key
        self.add_workspace_member = accounts.add_workspace_member
        self.remove_workspace_member = accounts.remove_workspace_member
        self.workspace_members = accounts.workspace_members
        # JobQueue
        self.enqueue_job = jobs.enqueue_job
        self.claim_jobs = jobs.claim_jobs
        self.enqueue_job_once = jobs.enqueue_job_once
        self.reschedule_job = jobs.reschedule_job
        self.complete_job = jobs.complete_job
        self.fail_job = jobs.fail_job
        self.pending_jobs = jobs.pending_jobs
        self.list_jobs = jobs.list_jobs
        self.get_job = jobs.get_job
        self.retry_dead_jobs = jobs.retry_dead_jobs
        # ErasureStore
        self.erase_user = erasure.erase_user
        self.erase_session = erasure.erase_session
        self.erase_message = erasure.erase_message
        self.delete_call = erasure.delete_call
        self.prune_messages = erasure.prune_messages
        self.scrub = erasure.scrub
        self.deep_scrub = erasure.deep_scrub
        # EmbeddingCache
        self.get_cached_embeddings = embeddings.get_cached_embeddings
        self.put_cached_embeddings = embeddings.put_cached_embeddings
        # VectorCache
        self.warm_vectors = vectors.warm_vectors


def _as_store(store: ComposedStore) -> base.Store:
    """Never called: the type checker's check that every method matches the protocol."""
    return store
